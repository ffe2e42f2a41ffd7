package deadletter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/deadletter"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

var quiet = slog.New(slog.DiscardHandler)

func jsonOf(h amqp.Table) ([]byte, error) { return json.Marshal(h) }

// redriver redrives this fixture's dead letters: consumer "inventory" reads
// the fixture's queue.
func redriver(t *testing.T, db *sqlx.DB, f *inboxtest.Broker) *deadletter.Redriver {
	t.Helper()
	pub := f.Conn.NewPublisher()
	t.Cleanup(pub.Close)
	return &deadletter.Redriver{DB: db, Publisher: pub, Log: quiet,
		QueueOf: func(consumer string) (string, bool) {
			if consumer == "inventory" {
				return f.Queue, true
			}
			return "", false
		}}
}

// recordDead stores e as a dead letter of consumer, failed for reason,
// with the headers and content type of its message, and returns the row.
func recordDead(t *testing.T, db *sqlx.DB, consumer string, e events.Envelope, reason string) deadletter.Letter {
	t.Helper()
	msg := inboxtest.Message(e)
	headers, err := jsonOf(msg.Headers)
	if err != nil {
		t.Fatal(err)
	}
	if err := deadletter.Record(context.Background(), db, deadletter.Letter{Consumer: consumer, EventID: e.EventID,
		EventType: e.Type, Reason: reason, Headers: headers, Payload: e.Payload, ContentType: &msg.ContentType}); err != nil {
		t.Fatal(err)
	}
	dl, _ := inboxtest.DeadLetter(t, db, consumer, e.EventID)
	return dl
}

func redrive(t *testing.T, r *deadletter.Redriver, sel deadletter.Selection) []deadletter.RedriveResult {
	t.Helper()
	res, err := r.Redrive(context.Background(), sel)
	if err != nil {
		t.Fatalf("redrive %+v: %v", sel, err)
	}
	return res
}

// A handler fails (once transiently, then permanently): the message is a
// dead letter after two attempts. The handler is fixed, the dead letter is
// redriven: it arrives on the consumer's queue with its original event_id
// and fresh attempts, is processed once, and the row is 'redriven'. A second
// redrive publishes nothing and changes nothing.
func TestRedriveOfAFixedDeadLetter(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	var broken atomic.Bool
	broken.Store(true)
	var mu sync.Mutex
	var seen []string // event id and attempt of each call
	c := inbox.NewConsumer(inbox.Config{Name: "inventory", DB: db.DB, Log: quiet,
		Backoff: retry.Backoff{Base: 50 * time.Millisecond, Cap: 100 * time.Millisecond},
		Handlers: map[events.Type]inbox.Handler{events.OrderCreated: func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
			mu.Lock()
			seen = append(seen, e.EventID)
			n := len(seen)
			mu.Unlock()
			switch {
			case !broken.Load():
				return inboxtest.Increment(ctx, tx, e)
			case n == 1:
				return fmt.Errorf("simulated: %w", inboxtest.ErrLockWait)
			default:
				return inbox.Permanent(errors.New("bug: cannot handle this order"))
			}
		}}})
	f := inboxtest.Consume(t, c.Handle, 0)
	e := inboxtest.Event(events.OrderCreated)
	e.OccurredAt = time.Now().Add(-time.Hour).Truncate(time.Second)
	f.Publish(t, inboxtest.Message(e))
	dl := inboxtest.WaitDeadLetter(t, db.DB, "inventory", e.EventID)
	if dl.Attempts != 2 || !strings.Contains(dl.Reason, "bug: cannot handle this order") {
		t.Fatalf("dead letter: attempts=%d reason=%q, want 2 and the handler's error", dl.Attempts, dl.Reason)
	}
	if dl.MessageTimestamp == nil || !dl.MessageTimestamp.Equal(e.OccurredAt) || dl.ContentType == nil || *dl.ContentType != "application/json" {
		t.Fatalf("dead letter kept timestamp %v content type %v, want %v and application/json", dl.MessageTimestamp, dl.ContentType, e.OccurredAt)
	}

	broken.Store(false) // the fix is deployed
	r := redriver(t, db.DB, f)
	res := redrive(t, r, deadletter.Selection{IDs: []uint64{dl.ID}})
	if len(res) != 1 || res[0].Outcome != deadletter.OutcomeRedriven || res[0].Queue != f.Queue || res[0].EventID != e.EventID {
		t.Fatalf("redrive results = %+v, want one redriven to %s", res, f.Queue)
	}
	inboxtest.WaitFor(t, "the redriven event to be processed", func() bool { return inboxtest.Effects(t, db.DB) == 1 })
	got, _ := inboxtest.DeadLetter(t, db.DB, "inventory", e.EventID)
	if got.Status != deadletter.StatusRedriven || got.RedrivenAt == nil {
		t.Fatalf("row after redrive: status %q redriven_at %v, want redriven with a time", got.Status, got.RedrivenAt)
	}
	if n := inboxtest.InboxRows(t, db.DB, e.EventID); n != 1 {
		t.Fatalf("inbox rows for the original event_id = %d, want 1", n)
	}

	// Again: nothing is published, the effect stays one.
	res = redrive(t, r, deadletter.Selection{IDs: []uint64{dl.ID}})
	if len(res) != 1 || res[0].Outcome != deadletter.OutcomeNotDead {
		t.Fatalf("second redrive = %+v, want not_dead", res)
	}
	res = redrive(t, r, deadletter.Selection{Consumer: "inventory"})
	if len(res) != 0 {
		t.Fatalf("filter redrive after the redrive = %+v, want nothing selected", res)
	}
	mu.Lock()
	calls := len(seen)
	mu.Unlock()
	if calls != 3 || inboxtest.Effects(t, db.DB) != 1 {
		t.Fatalf("handler calls = %d effects = %d, want 3 (two failures, one success) and 1", calls, inboxtest.Effects(t, db.DB))
	}
}

// The redriven message is the original (id, type, timestamp, headers with
// the numbers they had, body), minus the retry path's x- headers.
func TestRedriveMessageIsTheOriginal(t *testing.T) {
	t.Parallel()
	e := inboxtest.Event(events.OrderCreated)
	e.AggregateVersion = 7
	e.OccurredAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	orig := inboxtest.Message(e)
	orig.Headers[rabbit.HeaderRetryAttempt] = int64(3)
	orig.Headers[rabbit.HeaderFirstFailedAt] = int64(12345)
	orig.Headers["x-death"] = []any{amqp.Table{"count": int64(1)}}
	headers, err := jsonOf(orig.Headers)
	if err != nil {
		t.Fatal(err)
	}
	ct := "application/json"
	dl := deadletter.Letter{ID: 42, Consumer: "inventory", EventID: e.EventID, EventType: e.Type, Headers: headers,
		Payload: e.Payload, ContentType: &ct, MessageTimestamp: &e.OccurredAt, FirstFailedAt: time.Now()}
	m := deadletter.RedriveMessage(dl, "q1")
	if m.Exchange != "" || m.RoutingKey != "q1" {
		t.Fatalf("addressed to %q/%q, want the default exchange and the queue", m.Exchange, m.RoutingKey)
	}
	d := rabbit.Delivery{Delivery: amqp.Delivery{MessageId: m.Publishing.MessageId, Type: m.Publishing.Type,
		ContentType: m.Publishing.ContentType, Timestamp: m.Publishing.Timestamp, Headers: m.Publishing.Headers, Body: m.Publishing.Body}}
	got, err := d.Envelope()
	if err != nil {
		t.Fatalf("the redriven message does not parse: %v", err)
	}
	if got.EventID != e.EventID || got.AggregateVersion != 7 || got.AggregateID != e.AggregateID || !got.OccurredAt.Equal(e.OccurredAt) ||
		string(got.Payload) != string(e.Payload) {
		t.Fatalf("envelope = %+v, want the original %+v", got, e)
	}
	for _, h := range []string{rabbit.HeaderRetryAttempt, rabbit.HeaderFirstFailedAt, "x-death"} {
		if _, ok := m.Publishing.Headers[h]; ok {
			t.Errorf("header %s kept, want it dropped (a redrive starts with fresh attempts)", h)
		}
	}
	if m.Publishing.Headers[deadletter.HeaderRedriveOf] != int64(42) {
		t.Errorf("%s = %v, want 42", deadletter.HeaderRedriveOf, m.Publishing.Headers[deadletter.HeaderRedriveOf])
	}
	// A row from before the timestamp was kept: the first failure stands in.
	dl.MessageTimestamp, dl.ContentType = nil, nil
	if m := deadletter.RedriveMessage(dl, "q1"); !m.Publishing.Timestamp.Equal(dl.FirstFailedAt.UTC()) || m.Publishing.ContentType != "application/json" {
		t.Fatalf("old row: timestamp %v content type %q, want first_failed_at and application/json", m.Publishing.Timestamp, m.Publishing.ContentType)
	}
}

// An event that was already applied, and is also a dead letter (a second
// copy the broker dead-lettered), is redriven: the inbox drops it, the
// effect stays one.
func TestRedriveOfAnAppliedEventChangesNothing(t *testing.T) {
	t.Parallel()
	db, reg, f := inboxtest.Incrementing(t)
	e := inboxtest.Event(events.OrderCreated)
	msg := inboxtest.Message(e)
	f.Publish(t, msg)
	inboxtest.WaitFor(t, "the event to be applied", func() bool { return inboxtest.Effects(t, db.DB) == 1 })

	dl := recordDead(t, db.DB, "inventory", e, "broker dead-lettered the message: delivery_limit")
	res := redrive(t, redriver(t, db.DB, f), deadletter.Selection{IDs: []uint64{dl.ID}})
	if res[0].Outcome != deadletter.OutcomeRedriven {
		t.Fatalf("redrive = %+v, want redriven", res)
	}
	inboxtest.WaitFor(t, "the redriven copy to be suppressed", func() bool {
		return inboxtest.Counter(t, reg, "consumer_duplicates_suppressed_total", "inventory") == 1
	})
	if got, rows := inboxtest.Effects(t, db.DB), inboxtest.InboxRows(t, db.DB, e.EventID); got != 1 || rows != 1 {
		t.Fatalf("effects=%d inbox rows=%d, want 1 and 1", got, rows)
	}
}

// A filter selects dead rows by consumer, type and a substring of the
// payload; only those are redriven.
func TestRedriveByFilter(t *testing.T) {
	t.Parallel()
	db, _, f := inboxtest.Incrementing(t)
	add := func(consumer, typ, sku string) string {
		e := inboxtest.Event(typ)
		e.Payload = []byte(`{"order_id":"1","sku":"` + sku + `"}`)
		return recordDead(t, db.DB, consumer, e, "handler bug").EventID
	}
	want := []string{add("inventory", events.OrderCreated, "SKU-1"), add("inventory", events.OrderCreated, "SKU-1")}
	others := []string{
		add("inventory", events.OrderCreated, "SKU-2"),
		add("inventory", events.OrderCancelled, "SKU-1"),
		add("notifications", events.OrderCreated, "SKU-1"),
	}
	res := redrive(t, redriver(t, db.DB, f), deadletter.Selection{Consumer: "inventory", EventType: events.OrderCreated, Query: "SKU-1", Limit: 10})
	if len(res) != 2 {
		t.Fatalf("results = %+v, want the two matching rows", res)
	}
	for i, r := range res {
		if r.EventID != want[i] || r.Outcome != deadletter.OutcomeRedriven {
			t.Errorf("result %d = %+v, want %s redriven", i, r, want[i])
		}
	}
	inboxtest.WaitFor(t, "the two redriven events to be applied", func() bool { return inboxtest.Effects(t, db.DB) == 2 })
	for _, id := range others {
		var status string
		if err := db.Get(&status, `SELECT status FROM dead_letters WHERE event_id = ?`, id); err != nil || status != deadletter.StatusDead {
			t.Errorf("row %s: status %q (%v), want dead (not selected)", id, status, err)
		}
	}
}

// A publish the broker returns (no such queue) leaves the row dead, and so do
// an unknown consumer and an unknown id; each gets its own outcome.
func TestRedriveThatCannotPublishLeavesTheRowDead(t *testing.T) {
	t.Parallel()
	db, _, f := inboxtest.Incrementing(t)
	var ids []uint64
	for _, name := range []string{"inventory", "lost-consumer"} {
		ids = append(ids, recordDead(t, db.DB, name, inboxtest.Event(events.OrderCreated), "bug").ID)
	}
	r := redriver(t, db.DB, f)
	r.QueueOf = func(consumer string) (string, bool) {
		if consumer == "inventory" {
			return f.NS.Queue("no-such-queue"), true // unroutable: the broker returns it
		}
		return "", false
	}
	res := redrive(t, r, deadletter.Selection{IDs: append(ids, 999999)})
	want := []string{deadletter.OutcomePublishFailed, deadletter.OutcomeNoQueue, deadletter.OutcomeNotFound}
	if len(res) != 3 {
		t.Fatalf("results = %+v, want 3", res)
	}
	for i, r := range res {
		if r.Outcome != want[i] {
			t.Errorf("result %d = %+v, want outcome %s", i, r, want[i])
		}
	}
	if !strings.Contains(res[0].Detail, rabbit.ErrReturned.Error()) {
		t.Errorf("detail %q, want it to say the broker returned the message", res[0].Detail)
	}
	var n int
	if err := db.Get(&n, `SELECT COUNT(*) FROM dead_letters WHERE status = 'dead' AND redriven_at IS NULL`); err != nil || n != 2 {
		t.Fatalf("dead rows = %d (%v), want both still dead", n, err)
	}
	if inboxtest.Effects(t, db.DB) != 0 {
		t.Fatal("an effect happened")
	}
}

// Five redrives of one dead letter released together: the row is marked by
// exactly one, every copy that was published is absorbed by the inbox, the
// effect happens once.
func TestConcurrentRedrivesMarkOnce(t *testing.T) {
	t.Parallel()
	db, reg, f := inboxtest.Incrementing(t)
	e := inboxtest.Event(events.OrderCreated)
	dl := recordDead(t, db.DB, "inventory", e, "bug")
	const n = 5
	outcomes := make([]string, n)
	rs := make([]*deadletter.Redriver, n)
	for i := range rs {
		rs[i] = redriver(t, db.DB, f) // each its own channel
	}
	testutil.Together(n, func(i int) {
		res, err := rs[i].Redrive(context.Background(), deadletter.Selection{IDs: []uint64{dl.ID}})
		if err != nil {
			t.Error(err)
			return
		}
		outcomes[i] = res[0].Outcome
	})
	counts := map[string]int{}
	for _, o := range outcomes {
		counts[o]++
	}
	published := counts[deadletter.OutcomeRedriven] + counts[deadletter.OutcomeChanged]
	t.Logf("outcomes of %d concurrent redrives: %v", n, counts)
	if counts[deadletter.OutcomeRedriven] != 1 || published+counts[deadletter.OutcomeNotDead] != n {
		t.Fatalf("outcomes = %v, want exactly one redriven, the rest changed or not_dead", counts)
	}
	inboxtest.WaitFor(t, "every published copy to be consumed", func() bool {
		return inboxtest.Counter(t, reg, "consumer_processed_total", "inventory")+
			inboxtest.Counter(t, reg, "consumer_duplicates_suppressed_total", "inventory") == float64(published)
	})
	if got := inboxtest.Effects(t, db.DB); got != 1 {
		t.Fatalf("effects = %d, want 1 (published %d copies)", got, published)
	}
}

func TestRedriveSelectionIsChecked(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		sel  deadletter.Selection
		ok   bool
	}{
		{"ids", deadletter.Selection{IDs: []uint64{1}}, true},
		{"filter", deadletter.Selection{Consumer: "inventory"}, true},
		{"filter with limit", deadletter.Selection{Query: "SKU-1", Limit: 1000}, true},
		{"nothing", deadletter.Selection{}, false},
		{"only a limit", deadletter.Selection{Limit: 5}, false},
		{"ids and a filter", deadletter.Selection{IDs: []uint64{1}, Consumer: "inventory"}, false},
		{"limit too big", deadletter.Selection{Consumer: "inventory", Limit: 1001}, false},
		{"too many ids", deadletter.Selection{IDs: make([]uint64, 1001)}, false},
	}
	for _, tt := range tests {
		err := tt.sel.Check()
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, deadletter.ErrBadSelection)) {
			t.Errorf("%s: Check() = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}
