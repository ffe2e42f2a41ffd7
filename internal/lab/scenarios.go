package lab

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/relmsg/ordersaga/pkg/aids/wrongway"
)

// Scenario is one experiment of the chapter's table.
type Scenario struct {
	Name     string
	Title    string
	Window   string          // the failure window, in the chapter's words
	Holds    string          // what must hold after recovery
	WrongWay wrongway.Switch // the mistake a companion run turns on ("" if none)
	run      func(ctx context.Context, l *Lab, r *Report, wrong bool) error
}

// Scenarios lists the experiments in the chapter's order.
var Scenarios = []Scenario{
	{Name: "atomic-commit", Title: "atomic commit",
		Window: "error after the order insert, before the outbox insert", Holds: "neither the order nor its event exists",
		WrongWay: wrongway.PublishBeforeCommit, run: atomicCommit},
	{Name: "send-recovery", Title: "send recovery",
		Window: "dispatcher stopped after the commit, then started", Holds: "the original event is delivered",
		run: sendRecovery},
	{Name: "duplicate-window", Title: "duplicate window",
		Window: "process crash after the confirm, before marking sent", Holds: "may be delivered twice; stock reserved once",
		run: duplicateWindow},
	{Name: "consume-recovery", Title: "consume recovery",
		Window: "error after the business SQL, before the commit", Holds: "the inbox row and the stock change roll back together",
		WrongWay: wrongway.AckBeforeCommit, run: consumeRecovery},
	{Name: "ack-lost", Title: "ACK lost",
		Window: "channel closed after the commit, before the ACK", Holds: "the redelivery changes nothing",
		run: ackLost},
	{Name: "concurrent-duplicate", Title: "concurrent duplicate",
		Window: "two deliveries of one event_id processed at once", Holds: "one business effect, one inbox row",
		WrongWay: wrongway.NoInbox, run: concurrentDuplicate},
	{Name: "lease-expiry", Title: "lease expiry",
		Window: "dispatcher A paused, B re-claims, A resumes", Holds: "A cannot overwrite B's state",
		WrongWay: wrongway.MarkSentWithoutToken, run: leaseExpiry},
	{Name: "out-of-order", Title: "out of order",
		Window: "the cancel is delivered before the create", Holds: "the order is not resurrected; the gap is recorded",
		WrongWay: wrongway.IgnoreOrder, run: outOfOrder},

	// The chapter's other windows, in its order: the recovery table
	// (崩溃之后怎么恢复) and the unroutable return (什么时候标记 sent), the
	// third ACK pitfall (三个 ACK 坑), delta events (去重解决不了乱序), and
	// interview questions 1 and 7 (面试问答).
	{Name: "claim-crash", Title: "after claim, before publish",
		Window: "dispatcher crash after the claim, before the publish", Holds: "the lease expires, the row is re-queued with a backoff and sent once",
		run: claimCrash},
	{Name: "confirm-lost", Title: "published, confirm lost",
		Window: "the broker has the message, the confirm is lost", Holds: "re-sent with the same event_id; the inbox drops the copy",
		run: confirmLost},
	{Name: "unroutable", Title: "unroutable",
		Window: "no queue bound for the event: the broker returns it", Holds: "never marked sent; kept and retried; delivered once the binding is back",
		run: unroutable},
	{Name: "dedupe-record", Title: "dedupe record",
		Window: "consumer crash between the inbox INSERT and the business change", Holds: "both roll back; the redelivery applies once",
		WrongWay: wrongway.DedupeOwnTx, run: dedupeRecord},
	{Name: "delta-parking", Title: "delta parking",
		Window: "a delta arrives ahead of its gap", Holds: "parked (acked, not applied), then applied in order when the gap fills",
		run: deltaParking},
	{Name: "delta-overdue", Title: "delta overdue",
		Window: "a delta's gap never fills", Holds: "alerted once after its deadline; the parked record is kept",
		run: deltaOverdue},
	{Name: "commit-then-publish", Title: "commit, then publish",
		Window: "order service crash after COMMIT, before its event leaves", Holds: "the outbox row waits; inventory hears of the order after the restart",
		WrongWay: wrongway.PublishAfterCommit, run: commitThenPublish},
	{Name: "sync-reserve", Title: "synchronous reserve",
		Window: "inventory answers later than the caller waits", Holds: "the request never waits on inventory: accepted, then sold once",
		WrongWay: wrongway.SyncReserve, run: syncReserve},
}

// Find returns the scenario with that name.
func Find(name string) (Scenario, bool) {
	for _, s := range Scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// Run runs one scenario; wrong turns its wrong-way switch on for the run
// (and off again at the end). Failpoints it armed are disarmed at the end.
func (l *Lab) Run(ctx context.Context, s Scenario, wrong bool) *Report {
	r := &Report{Name: s.Name, Title: s.Title + ": " + s.Window + " -> " + s.Holds, step: l.step}
	for _, svc := range Services {
		if in := l.acted(svc, l.targets(svc)); in != nil {
			if r.Acted == nil {
				r.Acted = map[string][]string{}
			}
			r.Acted[svc] = in
		}
	}
	if wrong {
		if s.WrongWay == "" {
			r.check(false, chkWrongWay, s.Name)
			return r
		}
		r.WrongWay = string(s.WrongWay)
	}
	l.step(Step{Kind: StepStarted, What: r.Title, Switches: nonEmpty(r.WrongWay)})
	start := time.Now()
	if err := s.run(ctx, l, r, wrong); err != nil {
		r.check(false, chkRan, err)
		if r.Verdict == "" {
			r.Verdict = "the experiment could not complete: " + err.Error()
		}
	}
	r.Took = time.Since(start)
	// Leave the stack as we found it.
	cleanup := context.WithoutCancel(ctx)
	for _, svc := range Services {
		for _, i := range l.targets(svc) {
			_, _, _ = l.callAt(cleanup, i.ID, i.URL, http.MethodDelete, "/debug/failpoints", nil, nil, nil)
		}
		if wrong {
			_ = l.setWrongWay(cleanup, svc)
		}
	}
	l.step(Step{Kind: StepVerdict, Passed: r.Passed(), Verdict: r.Verdict, Seconds: r.Took.Seconds()})
	return r
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// givenUpIDs bounds how far past the last order the wrong way of
// atomic-commit looks for the id its rolled-back order took.
const givenUpIDs = 20

func key(name string) string { return fmt.Sprintf("lab-%s-%d", name, time.Now().UnixNano()) }
