package lab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/wrongway"
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
			r.check(false, "wrong way", "%s has no wrong-way switch", s.Name)
			return r
		}
		r.WrongWay = string(s.WrongWay)
	}
	l.step(Step{Kind: StepStarted, What: r.Title, Switches: nonEmpty(r.WrongWay)})
	start := time.Now()
	if err := s.run(ctx, l, r, wrong); err != nil {
		r.check(false, "the experiment ran to the end", "%v", err)
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

// --- atomic commit -------------------------------------------------------

func atomicCommit(ctx context.Context, l *Lab, r *Report, wrong bool) error {
	const sku, qty = "SKU-2", 2
	const point = "order.create.after-order-insert"
	k := key("atomic")
	last, err := l.lastOrderID(ctx)
	if err != nil {
		return err
	}
	// The failed insert takes the next auto-increment id and gives it up.
	// That is last+1 unless an insert failed since the last order (a
	// replayed Idempotency-Key fails on the unique key and uses an id too):
	// the wrong way looks for the id the events carried, the right way
	// checks every id up to the retry's.
	next := fmt.Sprint(last + 1)
	l.step(Step{Kind: StepOrder, OrderID: next, What: "the id the failing create takes"})
	before, err := l.begin(ctx, r, sku)
	if err != nil {
		return err
	}
	if err := l.wrongWayOn(ctx, r, "order"); err != nil {
		return err
	}
	if err := l.arm(ctx, "order", point, "error", 1); err != nil {
		return err
	}
	_, code, _, err := l.createOrder(ctx, k, "c-lab", sku, qty)
	if err != nil {
		return err
	}
	fp, _ := l.failpoint(ctx, "order", point)
	r.check(fp.Hits == 1, "the window was hit", "%s hit %d time(s)", point, fp.Hits)
	r.check(code == http.StatusInternalServerError, "the create failed", "POST /orders answered %d", code)

	if wrong {
		// The event left before the transaction rolled back.
		err := l.waitFor(ctx, "inventory and payment to act on the rolled-back order "+next, func() (bool, error) {
			for id := last + 1; id <= last+givenUpIDs; id++ {
				res, err := l.reservation(ctx, fmt.Sprint(id))
				if err != nil || res.Status == "" {
					continue
				}
				pay, err := l.payment(ctx, fmt.Sprint(id))
				if err == nil && pay.Status == "succeeded" {
					if next != fmt.Sprint(id) {
						next = fmt.Sprint(id)
						l.step(Step{Kind: StepOrder, OrderID: next, What: "the id the failing create took"})
					}
					return true, nil
				}
			}
			return false, nil
		})
		r.Sections = append(r.Sections, l.snapshot(ctx, "after the fault (wrong way: no outbox, published before COMMIT)", next, sku))
		b, berr := l.books(ctx, next)
		after, serr := l.stock(ctx, sku)
		if err = errors.Join(err, berr, serr); err != nil {
			return err
		}
		r.check(b.OrderCode == http.StatusNotFound && len(b.Outbox["order"]) == 0, "anomaly: the order does not exist",
			"GET /orders/%s answered %d; %d order outbox row(s)", next, b.OrderCode, len(b.Outbox["order"]))
		r.check(b.Reservation.Status == "reserved" && reserves(b.Reservation, sku, qty) && after.Reserved == before.Reserved+qty && after.OnHand == before.OnHand,
			"anomaly: inventory holds stock for it", "reservation %s; %s reserved %d -> %d, on_hand %d -> %d",
			lines(b.Reservation), sku, before.Reserved, after.Reserved, before.OnHand, after.OnHand)
		paid := len(b.Charges) == 1 && b.Charges[0].Status == "succeeded" && b.Charges[0].AmountCents == b.Payment.AmountCents && b.Payment.AmountCents > 0
		r.check(paid && b.Payment.Status == "succeeded" && len(b.Refunds) == 0, "anomaly: the customer was charged for it",
			"payment %s %d¢, PSP charges %s, refunds %s", orNone(b.Payment.Status), b.Payment.AmountCents, charges(b.Charges), refunds(b.Refunds))
		r.Verdict = "WRONG WAY (publish before commit): the order rolled back but its event had already left; inventory " +
			"reserved stock and the PSP charged the customer for an order that does not exist. The outbox row, " +
			"committed in the same transaction as the order, is what prevents this."
		return nil
	}

	r.Sections = append(r.Sections, l.snapshot(ctx, "after the fault", next, sku))
	b, err := l.books(ctx, next)
	if err != nil {
		return err
	}
	after, err := l.stock(ctx, sku)
	if err != nil {
		return err
	}
	r.check(b.OrderCode == http.StatusNotFound, "state: no order row", "GET /orders/%s answered %d", next, b.OrderCode)
	r.check(len(b.Outbox["order"]) == 0 && b.Reservation.Status == "", "side effects: no outbox row, nothing at inventory",
		"%d outbox row(s) for order %s, reservation %s", len(b.Outbox["order"]), next, orNone(b.Reservation.Status))
	r.checkStockUnchanged("nothing reserved", before, after)
	r.checkNothingCharged(b)

	// Recovery: the client retries with the same key; it is created once.
	o, code, hdr, err := l.createOrder(ctx, k, "c-lab", sku, qty)
	if err != nil {
		return err
	}
	r.check(code == http.StatusAccepted && hdr.Get("Idempotent-Replayed") == "", "the retry creates the order",
		"POST answered %d, replayed=%q: no order existed under the key", code, hdr.Get("Idempotent-Replayed"))
	var retryID uint64
	fmt.Sscan(o.OrderID, &retryID)
	var kept []string
	for id := last + 1; id < retryID; id++ {
		_, c, _ := l.order(ctx, fmt.Sprint(id))
		ev, _ := l.outbox(ctx, "order", fmt.Sprint(id))
		if c != http.StatusNotFound || len(ev) > 0 {
			kept = append(kept, fmt.Sprint(id))
		}
	}
	r.check(retryID > last && len(kept) == 0, "no order or event under any id given up",
		"ids %d to %d: none has an order row or an outbox row %v", last+1, retryID-1, kept)
	if _, err := l.settle(ctx, r, "after recovery (client retry)", o.OrderID, sku, qty, before, nil); err != nil {
		return err
	}
	r.Verdict = "held: one local transaction (orders + order_items + " + outbox.Table + "). The fault rolled the order and " +
		"its OrderCreated back together; the client's retry with the same Idempotency-Key created it once."
	return nil
}

// --- send recovery -------------------------------------------------------

func sendRecovery(ctx context.Context, l *Lab, r *Report, _ bool) error {
	const sku, qty = "SKU-2", 1
	before, err := l.begin(ctx, r, sku)
	if err != nil {
		return err
	}
	const point = "outbox.dispatch.before-claim"
	if err := l.arm(ctx, "order", point, "pause", 0); err != nil {
		return err
	}
	o, err := l.placeOrder(ctx, key("send"), sku, qty)
	if err != nil {
		return err
	}
	if err := l.waitPaused(ctx, "the dispatcher to stop at "+point, "order", point); err != nil {
		return err
	}
	created, err := l.outboxEvent(ctx, "order", o.OrderID, events.OrderCreated)
	if err != nil {
		return err
	}
	res, _ := l.reservation(ctx, o.OrderID)
	mid, _ := l.stock(ctx, sku)
	r.Sections = append(r.Sections, l.snapshot(ctx, "after the commit, dispatcher stopped", o.OrderID, sku))
	r.check(created.Status == "pending" && created.Attempts == 0, "the event waits as a pending row",
		"order.created %s is %s after %d attempts", short(created.EventID), created.Status, created.Attempts)
	r.check(res.Status == "", "inventory has not seen it", "reservation: %s", orNone(res.Status))
	r.checkStockUnchanged("nothing held while the event waits", before, mid)

	if err := l.disarm(ctx, "order", point); err != nil { // start the dispatcher again
		return err
	}
	b, err := l.settle(ctx, r, "after the dispatcher started again", o.OrderID, sku, qty, before, nil)
	if err != nil {
		return err
	}
	sent, _ := b.outboxRow("order", events.OrderCreated)
	r.check(sent.EventID == created.EventID && sent.Status == "sent" && sent.Attempts == 1 && b.inboxRows("inventory", created.EventID) == 1,
		"the original event was delivered", "event %s is %s after %d attempt(s); %d inventory inbox row(s) for it",
		short(sent.EventID), sent.Status, sent.Attempts, b.inboxRows("inventory", created.EventID))
	r.Verdict = "held: the committed event waited as a 'pending' outbox row; when the dispatcher came back it claimed " +
		"it and delivered the original event (same event_id). Recovery job: the dispatcher's claim (woken after " +
		"commit, or the fallback poll)."
	return nil
}

// --- duplicate window ----------------------------------------------------

func duplicateWindow(ctx context.Context, l *Lab, r *Report, _ bool) error {
	const sku, qty = "SKU-2", 3
	const point = "outbox.dispatch.after-confirm-before-mark"
	k := key("dup")
	before, err := l.begin(ctx, r, sku)
	if err != nil {
		return err
	}
	dups0, _ := l.metric(ctx, "inventory", "consumer_duplicates_suppressed_total", "consumer", "inventory")
	if err := l.armCrash(ctx, r, "order", point); err != nil {
		return err
	}
	o, _, err := l.createThroughCrash(ctx, r, point, k, sku, qty)
	if err != nil {
		return err
	}
	crashed, err := l.outboxEvent(ctx, "order", o.OrderID, events.OrderCreated)
	if err != nil {
		return err
	}
	r.Sections = append(r.Sections, l.snapshot(ctx, "after the crash (confirmed by the broker, not marked sent)", o.OrderID, sku))
	r.check(crashed.Status == "sending" && crashed.Attempts == 1, "the row is stuck in 'sending' under the dead claim",
		"order.created is %s after %d attempt(s)", crashed.Status, crashed.Attempts)

	if err := l.waitFor(ctx, "the lease to expire and the event to be re-sent", func() (bool, error) {
		ev, err := l.outboxEvent(ctx, "order", o.OrderID, events.OrderCreated)
		return ev.Status == "sent", err
	}); err != nil {
		return err
	}
	if err := l.waitFor(ctx, "inventory to drop the second delivery", func() (bool, error) {
		d, err := l.metric(ctx, "inventory", "consumer_duplicates_suppressed_total", "consumer", "inventory")
		return d > dups0, err
	}); err != nil {
		return err
	}
	b, err := l.settle(ctx, r, "after recovery (lease expired, event re-sent)", o.OrderID, sku, qty, before, nil)
	if err != nil {
		return err
	}
	sent, _ := b.outboxRow("order", events.OrderCreated)
	dups1, _ := l.metric(ctx, "inventory", "consumer_duplicates_suppressed_total", "consumer", "inventory")
	r.check(sent.EventID == crashed.EventID && sent.Attempts == 2, "the same event_id was sent twice",
		"event %s sent after %d attempts", short(sent.EventID), sent.Attempts)
	r.check(dups1 == dups0+1, "the inbox dropped the second delivery", "consumer_duplicates_suppressed_total{inventory} %g -> %g", dups0, dups1)
	r.Verdict = "held: the crash after the confirm left the row 'sending'; lease recovery re-sent the same event_id and " +
		"the inventory inbox's primary key (consumer_name, event_id) dropped the duplicate: stock reserved once."
	return nil
}

// createThroughCrash creates an order while the order service is armed to
// crash (SIGKILL) at point, which the create leads to. The crash may beat
// the answer to the client: then the client retries with the same key, as
// a client would, once the service is back. It checks that the process
// really died in the window, and returns the order and whether the answer
// came from the retry, a replay of the key (Idempotent-Replayed).
func (l *Lab) createThroughCrash(ctx context.Context, r *Report, point, k, sku string, qty int) (Order, bool, error) {
	o, code, _, err := l.createOrder(ctx, k, "c-lab", sku, qty)
	if err := l.crashed(ctx, r, "order", point, "the process crashed in the window"); err != nil {
		return o, false, err
	}
	if err == nil && code == http.StatusAccepted {
		return o, false, nil
	}
	o, code, hdr, err := l.createOrder(ctx, k, "c-lab", sku, qty) // the client's retry: same key, same order
	if err != nil || code != http.StatusAccepted {
		return o, false, fmt.Errorf("create after the restart: %d %v", code, err)
	}
	return o, hdr.Get("Idempotent-Replayed") == "true", nil
}

// armCrash makes svc crash (SIGKILL) at the next hit of point, in a real
// process (Target.PrepareCrash), with the run's wrong-way switch on there.
func (l *Lab) armCrash(ctx context.Context, r *Report, svc, point string) error {
	if err := l.prepareCrash(ctx, svc); err != nil {
		return err
	}
	if err := l.wrongWayOn(ctx, r, svc); err != nil {
		return err
	}
	return l.arm(ctx, svc, point, "crash", 1)
}

// crashed waits until svc, armed to crash at point, has died there and a
// new process serves, and checks it (what). AwaitRestart fails unless the
// process really died (and came back).
func (l *Lab) crashed(ctx context.Context, r *Report, svc, point, what string) error {
	err := l.awaitRestart(ctx, svc)
	detail := "died at " + point + " (SIGKILL) and came back"
	if err != nil {
		detail = err.Error()
	}
	r.check(err == nil, what, "%s %s", svc, detail)
	return err
}

// --- consume recovery ----------------------------------------------------

func consumeRecovery(ctx context.Context, l *Lab, r *Report, wrong bool) error {
	const sku, qty = "SKU-2", 2
	const point = "inbox.after-effect-before-commit"
	before, err := l.begin(ctx, r, sku)
	if err != nil {
		return err
	}
	retries0, _ := l.metric(ctx, "inventory", "consumer_retries_total", "consumer", "inventory")
	count := 0 // every hit: the retries keep failing until we disarm
	if wrong {
		count = 1
		if err := l.setWrongWay(ctx, "inventory", string(wrongway.AckBeforeCommit)); err != nil {
			return err
		}
	}
	if err := l.arm(ctx, "inventory", point, "error", count); err != nil {
		return err
	}
	o, err := l.placeOrder(ctx, key("consume"), sku, qty)
	if err != nil {
		return err
	}
	if err := l.waitHit(ctx, "inventory to fail inside its transaction", "inventory", point); err != nil {
		return err
	}
	created, err := l.outboxEvent(ctx, "order", o.OrderID, events.OrderCreated)
	if err != nil {
		return err
	}

	if wrong {
		// The message was acked before the transaction failed: nothing
		// will bring it back. Watch for longer than the right way needs to
		// recover (its first retry comes within about a second).
		b, after, err := l.watchBooks(ctx, fmt.Sprintf("%s: longer than the right way needs to retry", watchFor), o.OrderID, sku)
		if err != nil {
			return err
		}
		retries1, _ := l.metric(ctx, "inventory", "consumer_retries_total", "consumer", "inventory")
		r.Sections = append(r.Sections, l.snapshot(ctx, "3 s after the fault (wrong way: ACK before COMMIT)", o.OrderID, sku))
		r.check(b.inboxRows("inventory", created.EventID) == 0 && b.Reservation.Status == "" && len(b.Outbox["inventory"]) == 0,
			"anomaly: the event was lost", "%d inbox row(s), reservation %s, %d inventory outbox row(s)",
			b.inboxRows("inventory", created.EventID), orNone(b.Reservation.Status), len(b.Outbox["inventory"]))
		r.check(retries1 == retries0, "anomaly: no retry was ever scheduled", "consumer_retries_total %g -> %g", retries0, retries1)
		r.checkStates(b, "pending_inventory", "", "")
		r.checkStockUnchanged("nothing reserved for the stuck order", before, after)
		r.checkNothingCharged(b)
		r.Verdict = "WRONG WAY (ACK before COMMIT): the consumer acked, then its transaction failed; the broker had " +
			"already forgotten the message, so no retry ever came and the order is stuck in pending_inventory " +
			"(only reconciliation could find it). ACK after COMMIT is what prevents this."
		return nil
	}

	fp, _ := l.failpoint(ctx, "inventory", point)
	mid, _ := l.stock(ctx, sku)
	in, _ := l.inbox(ctx, "inventory", []string{created.EventID})
	res, _ := l.reservation(ctx, o.OrderID)
	inv, _ := l.outbox(ctx, "inventory", o.OrderID)
	r.Sections = append(r.Sections, l.snapshot(ctx, "after the fault (business SQL ran, then the error)", o.OrderID, sku))
	r.check(fp.Hits >= 1, "the window was hit", "%s hit %d time(s)", point, fp.Hits)
	r.check(len(in) == 0, "the inbox row rolled back", "%d inbox row(s) for %s", len(in), short(created.EventID))
	r.check(mid.Reserved == before.Reserved && mid.OnHand == before.OnHand && res.Status == "" && len(inv) == 0,
		"the stock change and its event rolled back", "reserved %d -> %d, on_hand %d -> %d, reservation %s, %d inventory outbox row(s)",
		before.Reserved, mid.Reserved, before.OnHand, mid.OnHand, orNone(res.Status), len(inv))

	if err := l.disarm(ctx, "inventory", point); err != nil {
		return err
	}
	if _, err := l.settle(ctx, r, "after recovery (delayed retry)", o.OrderID, sku, qty, before, nil); err != nil {
		return err
	}
	retries1, _ := l.metric(ctx, "inventory", "consumer_retries_total", "consumer", "inventory")
	r.check(retries1 > retries0, "the message was retried after a delay", "consumer_retries_total %g -> %g", retries0, retries1)
	r.Verdict = "held: the inbox row and the stock change are one transaction; the fault rolled both back, the message " +
		"was not acked, and the delayed retry (backoff with jitter) applied them once."
	return nil
}

// --- ACK lost ------------------------------------------------------------

func ackLost(ctx context.Context, l *Lab, r *Report, _ bool) error {
	const sku, qty = "SKU-2", 1
	const point = "inbox.after-commit-before-ack"
	before, err := l.begin(ctx, r, sku)
	if err != nil {
		return err
	}
	dups0, _ := l.metric(ctx, "inventory", "consumer_duplicates_suppressed_total", "consumer", "inventory")
	redel0, _ := l.metric(ctx, "inventory", "consumer_redeliveries_total", "consumer", "inventory")
	if err := l.arm(ctx, "inventory", point, "error", 1); err != nil {
		return err
	}
	o, err := l.placeOrder(ctx, key("ack"), sku, qty)
	if err != nil {
		return err
	}
	if err := l.waitHit(ctx, "inventory to commit and lose its ACK", "inventory", point); err != nil {
		return err
	}
	r.Sections = append(r.Sections, l.snapshot(ctx, "after the fault (committed, channel closed before the ACK)", o.OrderID, sku))
	if err := l.waitFor(ctx, "the redelivery to be dropped", func() (bool, error) {
		d, err := l.metric(ctx, "inventory", "consumer_duplicates_suppressed_total", "consumer", "inventory")
		return d > dups0, err
	}); err != nil {
		return err
	}
	if _, err := l.settle(ctx, r, "after recovery (channel closed without ACK, message redelivered)", o.OrderID, sku, qty, before, nil); err != nil {
		return err
	}
	fp, _ := l.failpoint(ctx, "inventory", point)
	dups1, _ := l.metric(ctx, "inventory", "consumer_duplicates_suppressed_total", "consumer", "inventory")
	redel1, _ := l.metric(ctx, "inventory", "consumer_redeliveries_total", "consumer", "inventory")
	r.check(fp.Hits >= 1, "the window was hit", "%s hit %d time(s)", point, fp.Hits)
	r.check(redel1 > redel0, "the broker redelivered", "consumer_redeliveries_total{inventory} %g -> %g", redel0, redel1)
	r.check(dups1 == dups0+1, "the inbox dropped it", "consumer_duplicates_suppressed_total{inventory} %g -> %g", dups0, dups1)
	r.Verdict = "held: the transaction committed but the ACK never left; the broker redelivered the message and the " +
		"inbox primary key turned it into a duplicate, acked without effect."
	return nil
}

// --- concurrent duplicate ------------------------------------------------

func concurrentDuplicate(ctx context.Context, l *Lab, r *Report, wrong bool) error {
	const sku, qty = "SKU-2", 2
	const point = "inbox.after-claim"
	before, err := l.begin(ctx, r, sku)
	if err != nil {
		return err
	}
	dups0, _ := l.metric(ctx, "inventory", "consumer_duplicates_suppressed_total", "consumer", "inventory")
	if err := l.wrongWayOn(ctx, r, "inventory"); err != nil {
		return err
	}
	if err := l.arm(ctx, "inventory", point, "pause", 1); err != nil {
		return err
	}
	deliveries0, _ := l.metric(ctx, "inventory", "consumer_deliveries_total", "consumer", "inventory")
	processed0, _ := l.metric(ctx, "inventory", "consumer_processed_total", "consumer", "inventory")
	o, err := l.placeOrder(ctx, key("concurrent"), sku, qty)
	if err != nil {
		return err
	}
	if err := l.waitPaused(ctx, "the first delivery to hold the event", "inventory", point); err != nil {
		return err
	}
	created, err := l.outboxEvent(ctx, "order", o.OrderID, events.OrderCreated)
	if err != nil {
		return err
	}
	// A second copy of the same event (same event_id), as a re-send would.
	if err := l.publish(ctx, envelopeOf(created)); err != nil {
		return err
	}
	if err := l.waitFor(ctx, "the second delivery to arrive while the first is open", func() (bool, error) {
		d, err := l.metric(ctx, "inventory", "consumer_deliveries_total", "consumer", "inventory")
		return d >= deliveries0+2, err
	}); err != nil {
		return err
	}
	// Give the second delivery a moment to reach the inbox INSERT (right
	// way: it blocks there on the first one's uncommitted key).
	time.Sleep(200 * time.Millisecond)
	r.Sections = append(r.Sections, l.snapshot(ctx, "both deliveries in flight (first paused after its inbox claim)", o.OrderID, sku))
	held, _ := l.failpoint(ctx, "inventory", point)
	delivered, _ := l.metric(ctx, "inventory", "consumer_deliveries_total", "consumer", "inventory")
	r.check(held.Paused == 1 && delivered >= deliveries0+2, "two deliveries of one event_id at once",
		"event %s: %g deliveries while the first is still paused at %s (%d paused)", short(created.EventID), delivered-deliveries0, point, held.Paused)
	if err := l.release(ctx, "inventory", point); err != nil {
		return err
	}
	if err := l.waitFor(ctx, "both deliveries to settle", func() (bool, error) {
		p, err1 := l.metric(ctx, "inventory", "consumer_processed_total", "consumer", "inventory")
		d, err2 := l.metric(ctx, "inventory", "consumer_duplicates_suppressed_total", "consumer", "inventory")
		if err1 != nil || err2 != nil {
			return false, fmt.Errorf("metrics: %v %v", err1, err2)
		}
		// The create and the confirm are processed too: count what the two
		// deliveries of the create added beyond those.
		return (p-processed0)+(d-dups0) >= 3, nil
	}); err != nil {
		return err
	}
	// Both ways end in one sale: the right way by the inbox key, the wrong
	// way only by the reservations table's own key.
	b, err := l.settle(ctx, r, "after both deliveries", o.OrderID, sku, qty, before, nil)
	if err != nil {
		return err
	}
	dups1, _ := l.metric(ctx, "inventory", "consumer_duplicates_suppressed_total", "consumer", "inventory")
	processed1, _ := l.metric(ctx, "inventory", "consumer_processed_total", "consumer", "inventory")
	if wrong {
		r.check(dups1 == dups0, "anomaly: the inbox never recognised the duplicate", "consumer_duplicates_suppressed_total %g -> %g", dups0, dups1)
		r.check(processed1-processed0 == 3, "anomaly: both deliveries ran as new events",
			"consumer_processed_total +%g (two copies of the create, and the confirm)", processed1-processed0)
		r.check(b.inboxRows("inventory", created.EventID) == 1, "and INSERT IGNORE hid it",
			"%d inbox row(s) for two processed deliveries", b.inboxRows("inventory", created.EventID))
		r.Verdict = "WRONG WAY (check-then-insert): both deliveries saw \"not processed\" and both ran the business " +
			"logic; INSERT IGNORE then hid the clash. Only the reservations table's own primary key kept the stock " +
			"right this time; a consumer whose effect has no such key applies it twice " +
			"(TestExperimentConcurrentDuplicateDoubleEffect shows it)."
		return nil
	}
	r.check(dups1 == dups0+1 && processed1-processed0 == 2, "one delivery was a duplicate",
		"consumer_duplicates_suppressed_total %g -> %g, consumer_processed_total +%g (the create once, and the confirm)",
		dups0, dups1, processed1-processed0)
	r.Verdict = "held: the second delivery's INSERT into " + inbox.Table + " waited on the first one's uncommitted key, then " +
		"failed with a duplicate key once the first committed: one effect, one inbox row."
	return nil
}

// --- lease expiry --------------------------------------------------------

func leaseExpiry(ctx context.Context, l *Lab, r *Report, wrong bool) error {
	// A sold-out SKU: inventory rejects the order, so the order service
	// emits no further event and its outbox holds only this OrderCreated.
	// Dispatcher B's pause then can only catch this event's claim.
	const sku, qty = "SKU-SOLDOUT", 1
	const pointA = "outbox.dispatch.after-confirm-before-mark"
	const pointB = "outbox.dispatch.after-claim"
	before, err := l.begin(ctx, r, sku)
	if err != nil {
		return err
	}
	lost0, _ := l.metric(ctx, "order", "outbox_claims_lost_total")
	dups0, _ := l.metric(ctx, "inventory", "consumer_duplicates_suppressed_total", "consumer", "inventory")
	if err := l.wrongWayOn(ctx, r, "order"); err != nil {
		return err
	}
	if err := l.arm(ctx, "order", pointA, "pause", 1); err != nil {
		return err
	}
	o, err := l.placeOrder(ctx, key("lease"), sku, qty)
	if err != nil {
		return err
	}
	if err := l.waitPaused(ctx, "dispatcher A to pause after the confirm", "order", pointA); err != nil {
		return err
	}
	a, err := l.outboxEvent(ctx, "order", o.OrderID, events.OrderCreated)
	if err != nil || a.ClaimToken == nil {
		return fmt.Errorf("A's claim: %+v %v", a, err)
	}
	tokenA := *a.ClaimToken
	// B will stop right after its own claim, so A's late mark meets B's
	// live claim.
	if err := l.arm(ctx, "order", pointB, "pause", 1); err != nil {
		return err
	}
	var b OutboxRow
	if err := l.waitFor(ctx, "A's lease to expire and dispatcher B to re-claim", func() (bool, error) {
		b, err = l.outboxEvent(ctx, "order", o.OrderID, events.OrderCreated)
		return err == nil && b.Status == "sending" && b.ClaimToken != nil && *b.ClaimToken != tokenA, err
	}); err != nil {
		fpA, _ := l.failpoint(ctx, "order", pointA)
		fpB, _ := l.failpoint(ctx, "order", pointB)
		return fmt.Errorf("%w (last row: %s, %d attempts, claim %v; A %+v; B %+v)", err, b.Status, b.Attempts, b.ClaimToken, fpA, fpB)
	}
	tokenB := *b.ClaimToken
	r.Sections = append(r.Sections, l.snapshot(ctx, "A paused with an expired lease; B holds a new claim", o.OrderID, sku))
	r.check(b.Attempts == 2, "B re-claimed after A's lease expired", "claim %s replaced %s, attempt %d", short(tokenB), short(tokenA), b.Attempts)

	if err := l.release(ctx, "order", pointA); err != nil { // A resumes and marks
		return err
	}
	var afterA OutboxRow
	if err := l.waitFor(ctx, "A to try its mark-sent", func() (bool, error) {
		lost, err := l.metric(ctx, "order", "outbox_claims_lost_total")
		afterA, _ = l.outboxEvent(ctx, "order", o.OrderID, events.OrderCreated)
		return lost > lost0 || afterA.Status == "sent", err
	}); err != nil {
		return err
	}
	r.Sections = append(r.Sections, l.snapshot(ctx, "A resumed and tried to mark the row sent", o.OrderID, sku))
	if wrong {
		r.check(afterA.Status == "sent" && afterA.ClaimToken == nil, "anomaly: A overwrote B's claim",
			"the row became %s with no claim token while B still held claim %s", afterA.Status, short(tokenB))
	} else {
		r.check(afterA.Status == "sending" && afterA.ClaimToken != nil && *afterA.ClaimToken == tokenB, "A changed nothing",
			"the row is still %s under B's claim %s", afterA.Status, short(tokenB))
	}
	if err := l.release(ctx, "order", pointB); err != nil {
		return err
	}
	if err := l.waitOrder(ctx, o.OrderID, "rejected"); err != nil {
		return err
	}
	if err := l.waitFor(ctx, "B to publish and mark", func() (bool, error) {
		fp, err := l.failpoint(ctx, "order", pointB)
		return fp.Hits >= 1 && fp.Paused == 0, err
	}); err != nil {
		return err
	}
	if err := l.waitFor(ctx, "the row to settle", func() (bool, error) {
		ev, err := l.outboxEvent(ctx, "order", o.OrderID, events.OrderCreated)
		lost, _ := l.metric(ctx, "order", "outbox_claims_lost_total")
		// The wrong way marks by event id alone: nobody ever sees a lost claim.
		return ev.Status == "sent" && (wrong || lost > lost0), err
	}); err != nil {
		return err
	}
	if err := l.waitFor(ctx, "inventory to drop B's copy", func() (bool, error) {
		d, err := l.metric(ctx, "inventory", "consumer_duplicates_suppressed_total", "consumer", "inventory")
		return d > dups0, err
	}); err != nil {
		return err
	}
	lost1, _ := l.metric(ctx, "order", "outbox_claims_lost_total")
	bk, err := l.quietBooks(ctx, o.OrderID)
	if err != nil {
		return err
	}
	after, err := l.stock(ctx, sku)
	if err != nil {
		return err
	}
	r.Sections = append(r.Sections, l.snapshot(ctx, "after B finished", o.OrderID, sku))
	created, _ := bk.outboxRow("order", events.OrderCreated)
	r.check(bk.Reservation.Status == "rejected" && bk.inboxRows("inventory", created.EventID) == 1, "both copies reached inventory, one took effect",
		"reservation %s, %d inbox row(s) for the event", orNone(bk.Reservation.Status), bk.inboxRows("inventory", created.EventID))
	// Sold out: one rejection, whoever marked the row.
	r.checkStates(bk, "rejected", "rejected", "")
	r.checkStockUnchanged("nothing held for the rejected order", before, after)
	r.checkNothingCharged(bk)
	r.checkEvents(bk, Events{"order": {events.OrderCreated}, "inventory": {events.InventoryRejected}})
	r.checkConsumedOnce(bk)
	if wrong {
		r.check(lost1 == lost0, "anomaly: neither dispatcher noticed", "outbox_claims_lost_total %g -> %g: both marks \"succeeded\"", lost0, lost1)
		r.Verdict = "WRONG WAY (mark sent without the claim token): A, whose lease had expired, marked the row sent " +
			"while B owned it, so B's own mark found nothing to change: the table no longer says who did what. " +
			"The claim-token condition on mark-sent is what prevents this."
		return nil
	}
	r.check(lost1 == lost0+1, "exactly one dispatcher lost its claim", "outbox_claims_lost_total %g -> %g", lost0, lost1)
	r.Verdict = "held: mark-sent is conditional on event_id + claim_token + status='sending'; A's late mark changed 0 " +
		"rows (outbox_claims_lost_total +1) and B's claim and state stood."
	return nil
}

// --- out of order --------------------------------------------------------

func outOfOrder(ctx context.Context, l *Lab, r *Report, wrong bool) error {
	const sku, qty = "SKU-2", 4
	const point = "outbox.dispatch.after-claim"
	before, err := l.begin(ctx, r, sku)
	if err != nil {
		return err
	}
	if err := l.wrongWayOn(ctx, r, "inventory"); err != nil {
		return err
	}
	// The create's first dispatch fails after its claim: it stays
	// 'sending' until its lease expires, so the cancel overtakes it.
	if err := l.arm(ctx, "order", point, "error", 1); err != nil {
		return err
	}
	o, err := l.placeOrder(ctx, key("order"), sku, qty)
	if err != nil {
		return err
	}
	if err := l.waitHit(ctx, "the create to be held back", "order", point); err != nil {
		return err
	}
	code, _, err := l.call(ctx, "order", http.MethodPost, "/orders/"+o.OrderID+"/cancel",
		map[string]string{"Idempotency-Key": key("cancel")}, map[string]string{"reason": "lab: cancel before create"}, nil)
	if err != nil || code != http.StatusAccepted {
		return fmt.Errorf("cancel: %d %v", code, err)
	}
	l.step(Step{Kind: StepCancel, OrderID: o.OrderID})
	if err := l.waitFor(ctx, "inventory to see the cancel first", func() (bool, error) {
		res, err := l.reservation(ctx, o.OrderID)
		return res.Status != "", err
	}); err != nil {
		return err
	}
	res, _ := l.reservation(ctx, o.OrderID)
	r.Sections = append(r.Sections, l.snapshot(ctx, "after the cancel overtook the create", o.OrderID, sku))
	r.check(res.Status == "cancelled_before_reserve", "the cancel left a marker", "reservation: %s", orNone(res.Status))
	gaps, _ := l.gaps(ctx, o.OrderID)
	if !wrong { // the wrong way keeps no gap records either
		r.check(len(gaps) == 1, "the gap was recorded", "%d gap record(s) for order %s", len(gaps), o.OrderID)
	}

	if err := l.waitFor(ctx, "the create's lease to expire and the create to arrive late", func() (bool, error) {
		ev, err := l.outboxEvent(ctx, "order", o.OrderID, events.OrderCreated)
		if err != nil || ev.Status != "sent" {
			return false, err
		}
		in, err := l.inbox(ctx, "inventory", []string{ev.EventID})
		return len(in) == 1, err
	}); err != nil {
		return err
	}
	if wrong {
		err := l.waitFor(ctx, "inventory to reserve for the cancelled order", func() (bool, error) {
			res, err := l.reservation(ctx, o.OrderID)
			return res.Status == "reserved" || res.Status == "committed", err
		})
		if err != nil {
			return err
		}
		b, err := l.quietBooks(ctx, o.OrderID)
		if err != nil {
			return err
		}
		st, _ := l.stock(ctx, sku)
		r.Sections = append(r.Sections, l.snapshot(ctx, "after the late create (wrong way: order ignored)", o.OrderID, sku))
		r.check(b.Order.Status == "cancelled" && b.Reservation.Status == "reserved" && reserves(b.Reservation, sku, qty) &&
			st.Reserved == before.Reserved+qty && st.OnHand == before.OnHand,
			"anomaly: stock held for a cancelled order", "order %s is %s, reservation %s, %s reserved %d -> %d, on_hand %d -> %d",
			o.OrderID, b.Order.Status, lines(b.Reservation), sku, before.Reserved, st.Reserved, before.OnHand, st.OnHand)
		_, reserved := b.outboxRow("inventory", events.InventoryReserved)
		r.check(reserved, "anomaly: and told the saga it was reserved", "inventory's outbox: %d row(s), inventory.reserved: %v",
			len(b.Outbox["inventory"]), reserved)
		r.checkNothingCharged(b) // payment's own cancel marker held
		r.Verdict = "WRONG WAY (ignore order): the late create was applied after its cancel and reserved stock for a " +
			"cancelled order (and set the rest of the saga going). The cancel marker and state-transition checks are " +
			"what prevent this."
		return nil
	}
	if err := l.waitFor(ctx, "payment to record the cancel", func() (bool, error) {
		pay, err := l.payment(ctx, o.OrderID)
		return pay.Status != "", err
	}); err != nil {
		return err
	}
	b, err := l.quietBooks(ctx, o.OrderID)
	if err != nil {
		return err
	}
	final, _ := l.stock(ctx, sku)
	gaps, _ = l.gaps(ctx, o.OrderID)
	r.Sections = append(r.Sections, l.snapshot(ctx, "after the late create arrived", o.OrderID, sku))
	r.check(b.Order.Status == "cancelled", "the order was not resurrected", "order %s is %s", o.OrderID, b.Order.Status)
	r.checkStates(b, "cancelled", "cancelled_before_reserve", "cancelled_before_charge")
	r.checkStockUnchanged("the late create reserved nothing", before, final)
	r.checkNothingCharged(b)
	r.checkEvents(b, Events{"order": {events.OrderCreated, events.OrderCancelled}})
	r.checkConsumedOnce(b)
	resolved := len(gaps) == 1 && gaps[0].ResolvedAt != nil
	r.check(resolved, "the gap record was closed", "%d gap record(s), resolved: %v", len(gaps), resolved)
	r.Verdict = "held: inbox dedupe does not fix ordering; the cancel left a marker (null compensation), the gap was " +
		"recorded, and the late create found the marker and changed nothing (no hanging reservation)."
	return nil
}

// Gap is a recorded ordering gap.
type Gap struct {
	AggregateID string     `json:"aggregate_id"`
	EventType   string     `json:"event_type"`
	ResolvedAt  *time.Time `json:"resolved_at"`
	Resolution  string     `json:"resolution"`
}

func (l *Lab) gaps(ctx context.Context, orderID string) ([]Gap, error) {
	var out struct {
		Gaps []Gap `json:"gaps"`
	}
	if err := l.get(ctx, "inventory", "/admin/gaps?aggregate_id="+orderID, &out); err != nil {
		return nil, err
	}
	return out.Gaps, nil
}
