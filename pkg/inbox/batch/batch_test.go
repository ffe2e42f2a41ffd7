package batch_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/instance"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/inbox/batch"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// The tests below hand HandleBatch the deliveries a worker would take at
// once, so the batch each test needs is certain; the consume-loop tests
// (batch=16 subtests) show the same paths with batches as they form.

func deliveries(es ...events.Envelope) []rabbit.Delivery {
	ds := make([]rabbit.Delivery, len(es))
	for i, e := range es {
		ds[i] = delivery(e, 1, time.Time{})
	}
	return ds
}

// newEvents makes n new events, each of its own aggregate (events of one
// aggregate where one calls out never share a run).
func newEvents(n int) []events.Envelope {
	es := make([]events.Envelope, n)
	for i := range es {
		es[i] = inboxtest.Event(events.OrderCreated)
		es[i].AggregateID = uint64(1000 + i)
	}
	return es
}

var quiet = slog.New(slog.DiscardHandler)

func delivery(e events.Envelope, attempt int, firstFailed time.Time) rabbit.Delivery {
	d := inboxtest.Delivery("inventory.order-events", e)
	d.Attempt, d.FirstFailedAt = attempt, firstFailed
	return d
}

// wantDecisions checks that every decision is a plain ack.
func wantAcks(t *testing.T, decisions []rabbit.Decision, n int) {
	t.Helper()
	if len(decisions) != n {
		t.Fatalf("%d decisions, want %d", len(decisions), n)
	}
	for i, d := range decisions {
		if d != rabbit.Ack() {
			t.Errorf("decision %d = %+v, want ack", i, d)
		}
	}
}

func TestBatchCommitsEachEventWithItsInboxRow(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	c, reg := inboxtest.Metered(db.DB, "inventory", inboxtest.Increment)
	es := newEvents(16)
	ctx := instance.With(context.Background(), "inventory-2")
	wantAcks(t, c.HandleBatch(ctx, deliveries(es...)), 16)
	inboxtest.WantEffects(t, db.DB, 16)
	for _, e := range es {
		inboxtest.WantInboxRows(t, db.DB, e.EventID, 1)
	}
	// Each row names the instance that applied it, as on the one-at-a-time
	// path (the timeline shows it).
	var unnamed int
	if err := db.Get(&unnamed, "SELECT COUNT(*) FROM consumer_inbox WHERE instance IS NULL OR instance <> 'inventory-2'"); err != nil {
		t.Fatal(err)
	}
	if unnamed != 0 {
		t.Fatalf("%d inbox rows of the batch do not name instance inventory-2", unnamed)
	}
	inboxtest.WantCounter(t, reg, "consumer_batches_total", "inventory", 1) // one transaction
	inboxtest.WantCounter(t, reg, "consumer_processed_total", "inventory", 16)
}

// An event processed earlier comes back inside a batch: the multi-row
// inbox INSERT fails on its key, the batch rolls back, and one at a time
// the old event is a duplicate while the others are applied once.
func TestDuplicateInsideABatch(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	c, reg := inboxtest.Metered(db.DB, "inventory", inboxtest.Increment)
	ctx := context.Background()
	es := newEvents(5)
	if err := c.Process(ctx, es[2]); err != nil {
		t.Fatal(err)
	}
	wantAcks(t, c.HandleBatch(ctx, deliveries(es...)), 5)
	inboxtest.WantEffects(t, db.DB, 5) // the earlier one + the four new
	inboxtest.WantCounter(t, reg, "consumer_duplicates_suppressed_total", "inventory", 1)
	inboxtest.WantCounter(t, reg, "consumer_batch_fallbacks_total", "inventory", 1)
	for _, e := range es {
		inboxtest.WantInboxRows(t, db.DB, e.EventID, 1)
	}
}

// Two deliveries of one event in one batch (a redelivery that met its
// original in the prefetch): the event takes effect once, both are acked.
func TestTwoDeliveriesOfOneEventInOneBatch(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	c, reg := inboxtest.Metered(db.DB, "inventory", inboxtest.Increment)
	es := newEvents(3)
	wantAcks(t, c.HandleBatch(context.Background(), deliveries(es[0], es[1], es[0], es[2])), 4)
	inboxtest.WantEffects(t, db.DB, 3)
	inboxtest.WantInboxRows(t, db.DB, es[0].EventID, 1)
	inboxtest.WantCounter(t, reg, "consumer_duplicates_suppressed_total", "inventory", 1)
}

// Poison inside a batch: a message that is not an event at all never
// enters the transaction; a valid event whose handler fails permanently
// rolls the batch back. Either way the poison becomes a dead letter and
// its neighbours are applied once.
func TestPoisonInsideABatch(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	es := newEvents(4)
	poison := es[1]
	c := inboxtest.Made(inbox.Config{Name: "inventory", DB: db.DB, Log: quiet},
		inboxtest.OnCreated(func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
			if e.EventID == poison.EventID {
				return inbox.Permanent(errors.New("simulated: cannot ever apply"))
			}
			return inboxtest.Increment(ctx, tx, e)
		}), nil)
	ds := deliveries(es...)
	noID := delivery(inboxtest.Event(events.OrderCreated), 1, time.Time{})
	noID.MessageId = "not-a-uuid"
	ds = append(ds, noID)
	wantAcks(t, c.HandleBatch(context.Background(), ds), 5)
	inboxtest.WantEffects(t, db.DB, 3) // the good neighbours
	for id, reason := range map[string]string{poison.EventID: "cannot ever apply", noID.MessageId: "invalid"} {
		dl, ok := inboxtest.DeadLetter(t, db.DB, "inventory", id)
		if !ok || !strings.Contains(dl.Reason, reason) {
			t.Errorf("dead letter of %s: %+v (found %v), want reason containing %q", id, dl, ok, reason)
		}
		if got := inboxtest.InboxRows(t, db.DB, id); got != 0 {
			t.Errorf("poison %s left %d inbox rows, want 0", id, got)
		}
	}
}

// A transient failure of one event (a lock wait) rolls the batch back; the
// others commit one at a time and that one is retried later, alone.
func TestTransientFailureInsideABatch(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	es := newEvents(4)
	c := inboxtest.Made(inbox.Config{Name: "inventory", DB: db.DB, Log: quiet},
		inboxtest.OnCreated(func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
			if e.EventID == es[3].EventID {
				return fmt.Errorf("simulated: %w", inboxtest.ErrLockWait)
			}
			return inboxtest.Increment(ctx, tx, e)
		}), nil)
	decisions := c.HandleBatch(context.Background(), deliveries(es...))
	wantAcks(t, decisions[:3], 3)
	if decisions[3] == rabbit.Ack() || !strings.Contains(decisions[3].Reason, "Lock wait") {
		t.Fatalf("decision of the failing event = %+v, want a delayed retry", decisions[3])
	}
	inboxtest.WantEffects(t, db.DB, 3)
	inboxtest.WantInboxRows(t, db.DB, es[3].EventID, 0)
}

// A crash after the batch's COMMIT, before its ACKs: every message comes
// back (redelivered), each is dropped as a duplicate, and each event took
// effect once.
func TestCrashAfterBatchCommitBeforeAcks(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	c, reg := inboxtest.Metered(db.DB, "inventory", inboxtest.Increment)
	fp := failpoint.NewRegistry()
	fp.Error("inbox.after-commit-before-ack", 1)
	ctx := failpoint.WithRegistry(context.Background(), fp)
	es := newEvents(8)
	ds := deliveries(es...)
	for i, d := range c.HandleBatch(ctx, ds) {
		if d.Reason == "" || d == rabbit.Ack() {
			t.Fatalf("decision %d = %+v, want the channel abandoned without ack", i, d)
		}
	}
	for i := range ds {
		ds[i].Redelivered = true
	}
	wantAcks(t, c.HandleBatch(ctx, ds), 8)
	inboxtest.WantEffects(t, db.DB, 8) // once each
	inboxtest.WantCounter(t, reg, "consumer_duplicates_suppressed_total", "inventory", 8)
}

// The same crash through the consume loop and the broker: the abandoned
// channel returns the batch's messages, the redeliveries are duplicates.
func TestCrashAfterBatchCommitThroughTheBroker(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	c, reg := inboxtest.Metered(db.DB, "inventory", inboxtest.Increment)
	fp := failpoint.NewRegistry()
	published := make(chan struct{})
	var mu sync.Mutex
	calls, crashed := 0, 0
	handle := func(ctx context.Context, ds []rabbit.Delivery) []rabbit.Decision {
		mu.Lock()
		calls++
		call := calls
		mu.Unlock()
		switch call {
		case 1:
			// Hold the one worker until every message is queued: the
			// broker pushes them meanwhile (prefetch), and the worker's next
			// take is the batch of those already waiting.
			<-published
		case 2:
			fp.Error("inbox.after-commit-before-ack", 1)
			crashed = len(ds)
		}
		return c.HandleBatch(failpoint.WithRegistry(ctx, fp), ds)
	}
	b := inboxtest.ConsumeBatch(t, handle, 1, 16)
	const n = 10
	for i := 0; i < n; i++ {
		b.Publish(t, inboxtest.Message(inboxtest.Event(events.OrderCreated)))
	}
	close(published)
	inboxtest.WaitFor(t, "every event applied", func() bool { return inboxtest.Effects(t, db.DB) == n })
	mu.Lock()
	inCrash := crashed
	mu.Unlock()
	t.Logf("deliveries in the batch that crashed after its commit: %d", inCrash)
	inboxtest.WaitFor(t, "the crashed batch's redeliveries dropped as duplicates", func() bool {
		return inboxtest.Counter(t, reg, "consumer_duplicates_suppressed_total", "inventory") >= float64(inCrash)
	})
	inboxtest.WantEffects(t, db.DB, n) // once each
	for _, name := range []string{"consumer_processed_total", "consumer_batched_events_total"} {
		t.Logf("%s = %v", name, inboxtest.Counter(t, reg, name, "inventory"))
	}
}

// The handlers' result events are written together, once, with the batch;
// a batch that rolls back leaves none of its own, only those of the
// events applied one at a time afterwards.
func TestBatchWritesEveryResultEventOnce(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	es := newEvents(6)
	for i := range es {
		es[i].AggregateID = uint64(100 + i)
	}
	poison := es[5]
	c := inboxtest.Made(inbox.Config{Name: "inventory", DB: db.DB, Log: quiet},
		inboxtest.OnCreated(func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
			if _, err := outbox.Add(ctx, tx, outbox.Event{AggregateID: e.AggregateID, AggregateVersion: 1,
				Type: events.InventoryReserved, Payload: map[string]string{"order_id": fmt.Sprint(e.AggregateID)}}); err != nil {
				return err
			}
			if e.EventID == poison.EventID {
				return inbox.Permanent(errors.New("simulated: cannot ever apply"))
			}
			return inboxtest.Increment(ctx, tx, e)
		}), nil)
	ctx := context.Background()
	wantAcks(t, c.HandleBatch(ctx, deliveries(es[:3]...)), 3)
	wantAcks(t, c.HandleBatch(ctx, deliveries(es[3:]...)), 3)
	var got []uint64
	if err := db.Select(&got, `SELECT aggregate_id FROM outbox_events ORDER BY aggregate_id`); err != nil {
		t.Fatal(err)
	}
	if want := []uint64{100, 101, 102, 103, 104}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("result events of orders %v, want %v (once each, none for the poison)", got, want)
	}
}

// externalCalls counts an ExternalHandler's calls per event.
type externalCalls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *externalCalls) of(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

// external is an ExternalHandler that counts its calls and fails as fail
// says; its record step is record.
func (c *externalCalls) external(fail map[string]error, record inbox.Handler) batch.ExternalHandler[*sqlx.Tx] {
	return func(ctx context.Context, e events.Envelope) (batch.Handler[*sqlx.Tx], error) {
		c.mu.Lock()
		if c.n == nil {
			c.n = map[string]int{}
		}
		c.n[e.EventID]++
		c.mu.Unlock()
		if err := fail[e.EventID]; err != nil {
			return nil, err
		}
		return batch.Handler[*sqlx.Tx](record), nil
	}
}

// Events with an external call (the PSP's charges) in one batch: each new
// event is called once, before the transaction, and the records of all
// outcomes commit in one transaction; an event the inbox already has is
// not called again; a call that fails is decided on its own (retry later,
// dead letter) and its neighbours commit.
func TestExternalCallsOfABatchShareOneTransaction(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	es := newEvents(8)
	calls := &externalCalls{}
	fail := map[string]error{
		es[1].EventID: fmt.Errorf("simulated PSP timeout: %w", inboxtest.ErrLockWait),
		es[2].EventID: inbox.Permanent(errors.New("simulated: PSP refused the charge")),
	}
	reg := prometheus.NewRegistry()
	c := inboxtest.Made(inbox.Config{Name: "payment-psp", DB: db.DB, Log: quiet,
		Metrics: inbox.NewMetrics(reg)},
		batch.Handlers[*sqlx.Tx]{External: map[events.Type]batch.ExternalHandler[*sqlx.Tx]{events.OrderCreated: calls.external(fail, inboxtest.Increment)}},
		batch.NewMetrics(reg))
	ctx := context.Background()
	if err := c.Process(ctx, es[0]); err != nil { // committed before the batch
		t.Fatal(err)
	}
	decisions := c.HandleBatch(ctx, deliveries(es...))

	if d := decisions[1]; d == rabbit.Ack() || !strings.Contains(d.Reason, "PSP timeout") {
		t.Errorf("decision of the failed call = %+v, want a delayed retry", d)
	}
	if dl, ok := inboxtest.DeadLetter(t, db.DB, "payment-psp", es[2].EventID); !ok || !strings.Contains(dl.Reason, "refused") {
		t.Errorf("dead letter of the refused call: %+v (found %v)", dl, ok)
	}
	wantAcks(t, append([]rabbit.Decision{decisions[0], decisions[2]}, decisions[3:]...), 7)
	inboxtest.WantEffects(t, db.DB, 6) // the earlier one and the five new
	for i, e := range es {
		if got := calls.of(e.EventID); got != 1 {
			t.Errorf("event %d called the external system %d times, want 1", i, got)
		}
		want := 1
		if i == 1 || i == 2 {
			want = 0
		}
		if got := inboxtest.InboxRows(t, db.DB, e.EventID); got != want {
			t.Errorf("event %d has %d inbox rows, want %d", i, got, want)
		}
	}
	if got := inboxtest.Counter(t, reg, "consumer_batches_total", "payment-psp"); got != 1 {
		t.Errorf("batches = %v, want 1 (the five outcomes in one transaction)", got)
	}
	if got := inboxtest.Counter(t, reg, "consumer_batched_events_total", "payment-psp"); got != 5 {
		t.Errorf("batched events = %v, want 5", got)
	}
	if got := inboxtest.Counter(t, reg, "consumer_duplicates_suppressed_total", "payment-psp"); got != 1 {
		t.Errorf("duplicates = %v, want 1", got)
	}
}

// A batch of recorded outcomes that rolls back (here: one record step
// fails) falls back to one event at a time, which calls the external
// system again with the same event: the reason the external system must
// answer a repeated key the same way. Every outcome is still recorded
// once.
func TestExternalBatchRollbackCallsAgain(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	es := newEvents(4)
	calls := &externalCalls{}
	record := func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
		if e.EventID == es[3].EventID {
			return inbox.Permanent(errors.New("simulated: the outcome cannot be recorded"))
		}
		return inboxtest.Increment(ctx, tx, e)
	}
	c := inboxtest.Made(inbox.Config{Name: "payment-psp", DB: db.DB, Log: quiet},
		batch.Handlers[*sqlx.Tx]{External: map[events.Type]batch.ExternalHandler[*sqlx.Tx]{events.OrderCreated: calls.external(nil, record)}}, nil)
	wantAcks(t, c.HandleBatch(context.Background(), deliveries(es...)), 4)
	inboxtest.WantEffects(t, db.DB, 3)
	for i, e := range es {
		if got := calls.of(e.EventID); got != 2 {
			t.Errorf("event %d: %d external calls, want 2 (the batch's and its own)", i, got)
		}
	}
	if _, ok := inboxtest.DeadLetter(t, db.DB, "payment-psp", es[3].EventID); !ok {
		t.Error("the event whose outcome cannot be recorded is not a dead letter")
	}
}

// A handler that panics inside a batch: the batch rolls back, its other
// events commit one at a time, and the panicking one is decided like a
// failed attempt (a retry), with nothing of it committed. The process goes
// on.
func TestPanicInsideABatch(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	es := newEvents(4)
	c, reg := inboxtest.Metered(db.DB, "inventory", func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
		if err := inboxtest.Increment(ctx, tx, e); err != nil {
			return err
		}
		if e.EventID == es[2].EventID {
			panic("simulated bug in a handler")
		}
		return nil
	})
	decisions := c.HandleBatch(context.Background(), deliveries(es...))
	wantAcks(t, append(decisions[:2:2], decisions[3]), 3)
	if d := decisions[2]; d == rabbit.Ack() || d.Abandoned() || !strings.Contains(d.Reason, "panicked") {
		t.Fatalf("decision of the panicking event = %+v, want a delayed retry", d)
	}
	inboxtest.WantEffects(t, db.DB, 3)
	inboxtest.WantInboxRows(t, db.DB, es[2].EventID, 0)
	inboxtest.WantCounter(t, reg, "consumer_batch_fallbacks_total", "inventory", 1)
}

// Every delivery has its own time bound: a batch that runs out of its time
// rolls back, and each of its deliveries then gets a whole bound of its own
// on the chapter's path, none starting on an expired context.
func TestEachDeliveryOfAFallbackHasItsOwnTimeBound(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	es := newEvents(4)
	slow := func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
		select { // each event's work takes 600 ms; the bound is 2 s
		case <-time.After(600 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		return inboxtest.Increment(ctx, tx, e)
	}
	reg := prometheus.NewRegistry()
	_, b := batch.New(inbox.Config{Name: "inventory", DB: db.DB, Log: quiet, Metrics: inbox.NewMetrics(reg)},
		batch.Handlers[*sqlx.Tx]{Direct: func(tx *sqlx.Tx) *sqlx.Tx { return tx }, Batched: func(b *batch.Tx) *sqlx.Tx { return b.Tx },
			Plain: map[events.Type]batch.Handler[*sqlx.Tx]{events.OrderCreated: slow}},
		// 1.4 s of slack for each delivery's own transaction on a loaded machine
		batch.Options{Timeout: 2 * time.Second, Metrics: batch.NewMetrics(reg)})
	wantAcks(t, b.HandleBatch(context.Background(), deliveries(es...)), 4)
	inboxtest.WantEffects(t, db.DB, 4)
	inboxtest.WantCounter(t, reg, "consumer_batch_fallbacks_total", "inventory", 1) // the batch of four needs 2.4 s
}

// logStore is a store that logs what its handler did, as the services'
// stores do (Store.Log).
type logStore struct {
	tx  *sqlx.Tx
	log func(*slog.Logger) *slog.Logger
}

// The log lines of a batch's handlers are written after its COMMIT, and a
// batch that rolls back writes none of its own: only the lines of the
// events committed one at a time afterwards, once each.
func TestLogLinesOfABatchOnlyAfterItsCommit(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	es := newEvents(3)
	var buf testutil.SyncBuffer
	base := slog.New(slog.NewTextHandler(&buf, nil))
	applied := func(ctx context.Context, s logStore, e events.Envelope) error {
		if err := inboxtest.Increment(ctx, s.tx, e); err != nil {
			return err
		}
		s.log(base).Info("applied", "event_id", e.EventID)
		if e.EventID == es[2].EventID {
			return inbox.Permanent(errors.New("simulated: cannot ever apply"))
		}
		return nil
	}
	_, b := batch.New(inbox.Config{Name: "inventory", DB: db.DB, Log: quiet},
		batch.Handlers[logStore]{
			Direct:  func(tx *sqlx.Tx) logStore { return logStore{tx, func(l *slog.Logger) *slog.Logger { return l }} },
			Batched: func(b *batch.Tx) logStore { return logStore{b.Tx, b.Log} },
			Plain:   map[events.Type]batch.Handler[logStore]{events.OrderCreated: applied},
		}, batch.Options{})
	b.HandleBatch(context.Background(), deliveries(es...))
	for i, e := range es {
		want := 1 // the one-at-a-time line; the rolled-back batch's is not written
		if got := strings.Count(buf.String(), e.EventID); got != want {
			t.Errorf("event %d: %d log lines, want %d:\n%s", i, got, want, buf.String())
		}
	}
}
