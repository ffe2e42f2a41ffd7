package experiments

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/pkg/outbox"
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
	consumer := inboxtest.DB(t)
	var fixed atomic.Bool
	var seen inboxtest.Corrects // corrects_event_id as the handler read it
	c, reg := inboxtest.Metered(consumer.DB, "inventory", seen.Record(func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
		if !fixed.Load() {
			return nil // the bug: processed, nothing recorded
		}
		return inboxtest.Increment(ctx, tx, e)
	}))
	b := inboxtest.Consume(t, c.Handle, 1)
	producer := b.Producer(t)
	duplicates := func() float64 {
		return inboxtest.Counter(t, reg, "consumer_duplicates_suppressed_total", "inventory")
	}
	payload := map[string]string{"order_id": "1"}

	original := producer.Add(t, outbox.Event{AggregateID: 1, AggregateVersion: 1, Type: events.OrderCreated, Payload: payload})
	producer.Dispatch(t, 1)
	inboxtest.WaitFor(t, "the original to be processed", func() bool { return inboxtest.InboxRows(t, consumer.DB, original) == 1 })
	fixed.Store(true)

	if done, err := outbox.Requeue(ctx, producer.DB, original, outbox.StatusSent); err != nil || !done {
		t.Fatalf("requeue = %v, %v", done, err)
	}
	producer.Dispatch(t, 1)
	inboxtest.WaitFor(t, "the replay to be dropped", func() bool { return duplicates() == 1 })
	if n := inboxtest.Effects(t, consumer.DB); n != 0 {
		t.Fatalf("effects after the replay = %d, want 0: the inbox must drop a replay", n)
	}
	t.Logf("the replay kept event_id %s: the inbox dropped it as a duplicate, and the effect is still missing", original)

	correction := producer.Add(t, outbox.Event{AggregateID: 1, AggregateVersion: 2, Type: events.OrderCreated, Payload: payload,
		Corrects: original})
	producer.Dispatch(t, 1)
	inboxtest.WaitFor(t, "the correction to be applied", func() bool { return inboxtest.Effects(t, consumer.DB) == 1 })
	got, _ := seen.Of(correction)
	if correction == original || got != original || duplicates() != 1 {
		t.Fatalf("correction %s read as correcting %q (duplicates %g), want a new id correcting %s", correction, got, duplicates(), original)
	}
	t.Logf("the correction %s names %s in corrects_event_id: the inbox took it as a new event and applied it once", correction, original)
}
