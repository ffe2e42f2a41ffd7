package experiments

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/sqldb"
	"github.com/relmsg/ordersaga/pkg/sqldb/sqldbtest"
)

// 有限重试与死信: "重投仍使用原事件 ID；如果确实需要发起新的纠正操作，应分配新事件 ID，
// 并记录它与原事件的关系" (docs/course-map.md, "Four more rules"). An event
// reaches a consumer whose handler, the first time, records nothing (a
// bug, fixed since; or a dedupe record committed apart from its effect):
// the inbox holds the event, the effect is missing. A replay, the same row
// and event_id sent again, is what a lost message needs, and here it
// cannot help: the inbox drops it. A correction is a new decision: a new
// event with an event_id of its own whose corrects_event_id names the
// original; the dispatcher sends the link as a header, and the inbox takes
// the correction as a new event.
func TestACorrectionIsANewEventAReplayIsNot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	producer := sqldbtest.New(t, "order")
	consumer := inboxtest.DB(t)
	var fixed atomic.Bool
	var mu sync.Mutex
	corrects := map[string]string{} // event id -> corrects_event_id, as the handler read it
	c, reg := inboxtest.Metered(consumer.DB, "inventory", func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
		mu.Lock()
		corrects[e.EventID] = e.CorrectsEventID
		mu.Unlock()
		if !fixed.Load() {
			return nil // the bug: processed, nothing recorded
		}
		return inboxtest.Increment(ctx, tx, e)
	})
	b := inboxtest.Consume(t, c.Handle, 1)
	d := outbox.New(producer.DB, outbox.Config{Exchange: b.NS.Exchange(),
		NewPublisher: func() outbox.Publisher { return b.Conn.NewPublisher() }})
	pub := b.Conn.NewPublisher()
	t.Cleanup(pub.Close)
	dispatch := func() {
		t.Helper()
		if res, err := d.DispatchOnce(ctx, pub); err != nil || res.Sent != 1 {
			t.Fatalf("dispatch = %+v, %v; want one sent", res, err)
		}
	}
	write := func(e outbox.Event) string {
		t.Helper()
		var ids []string
		if err := sqldb.WithTx(ctx, producer.DB, func(tx *sqlx.Tx) error {
			var err error
			ids, err = outbox.Add(ctx, tx, e)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return ids[0]
	}
	duplicates := func() float64 {
		return inboxtest.Counter(t, reg, "consumer_duplicates_suppressed_total", "inventory")
	}
	payload := map[string]string{"order_id": "1"}

	original := write(outbox.Event{AggregateID: 1, AggregateVersion: 1, Type: events.OrderCreated, Payload: payload})
	dispatch()
	inboxtest.WaitFor(t, "the original to be processed", func() bool { return inboxtest.InboxRows(t, consumer.DB, original) == 1 })
	fixed.Store(true)

	if done, err := outbox.Requeue(ctx, producer.DB, original, outbox.StatusSent); err != nil || !done {
		t.Fatalf("requeue = %v, %v", done, err)
	}
	dispatch()
	inboxtest.WaitFor(t, "the replay to be dropped", func() bool { return duplicates() == 1 })
	if n := inboxtest.Effects(t, consumer.DB); n != 0 {
		t.Fatalf("effects after the replay = %d, want 0: the inbox must drop a replay", n)
	}
	t.Logf("the replay kept event_id %s: the inbox dropped it as a duplicate, and the effect is still missing", original)

	correction := write(outbox.Event{AggregateID: 1, AggregateVersion: 2, Type: events.OrderCreated, Payload: payload,
		Corrects: original})
	dispatch()
	inboxtest.WaitFor(t, "the correction to be applied", func() bool { return inboxtest.Effects(t, consumer.DB) == 1 })
	mu.Lock()
	got := corrects[correction]
	mu.Unlock()
	if correction == original || got != original || duplicates() != 1 {
		t.Fatalf("correction %s read as correcting %q (duplicates %g), want a new id correcting %s", correction, got, duplicates(), original)
	}
	t.Logf("the correction %s names %s in corrects_event_id: the inbox took it as a new event and applied it once", correction, original)
}
