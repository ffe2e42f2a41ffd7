package outbox_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/pkg/outbox"
)

// A replay and a correction, from the producer's outbox through the broker
// to a consumer's inbox (the chapter, 有限重试与死信: 重投仍使用原事件 ID；如果确实需要
// 发起新的纠正操作，应分配新事件 ID，并记录它与原事件的关系):
//
//   - the original event is applied once;
//   - a replay (Requeue: the same row, the same event_id) reaches the
//     consumer again and its inbox drops it: still one effect;
//   - a correction (a new row whose Corrects names the original) has an
//     event_id of its own, stores the relation in corrects_event_id,
//     carries it in the corrects_event_id header, and the inbox takes it as
//     a new event: applied once, with the relation in the consumer's hands.
func TestCorrectionIsANewEventThatNamesTheEventItCorrects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	consumer := inboxtest.DB(t)
	var seen inboxtest.Corrects
	c, reg := inboxtest.Metered(consumer.DB, "inventory", seen.Record(inboxtest.Increment))
	b := inboxtest.Consume(t, c.Handle, 1)
	producer := b.Producer(t)
	payload := map[string]string{"order_id": "1"}

	original := producer.Add(t, outbox.Event{AggregateID: 1, AggregateVersion: 1, Type: events.OrderCreated, Payload: payload})
	producer.Dispatch(t, 1)
	inboxtest.WaitFor(t, "the original to be applied", func() bool { return inboxtest.Effects(t, consumer.DB) == 1 })

	// A replay: the same row, the same id. The inbox drops it.
	if done, err := outbox.Requeue(ctx, producer.DB, original, outbox.StatusSent); err != nil || !done {
		t.Fatalf("requeue = %v, %v", done, err)
	}
	producer.Dispatch(t, 1)
	inboxtest.WaitFor(t, "the replay to be dropped as a duplicate", func() bool {
		return inboxtest.Counter(t, reg, "consumer_duplicates_suppressed_total", "inventory") == 1
	})
	if n := inboxtest.Effects(t, consumer.DB); n != 1 {
		t.Fatalf("effects after the replay = %d, want 1: a replay must be deduplicated", n)
	}

	// A correction: a new event, the relation recorded.
	correction := producer.Add(t, outbox.Event{AggregateID: 1, AggregateVersion: 2, Type: events.OrderCreated,
		Payload: payload, Corrects: original})
	if correction == original {
		t.Fatalf("the correction reuses the original's id %s", original)
	}
	rows, err := outbox.OfAggregate(ctx, producer.DB, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].CorrectsEventID != nil || rows[1].EventID != correction ||
		rows[1].CorrectsEventID == nil || *rows[1].CorrectsEventID != original {
		t.Fatalf("outbox rows = %+v, want the original (no link) and the correction linked to %s", rows, original)
	}
	producer.Dispatch(t, 1)
	inboxtest.WaitFor(t, "the correction to be applied", func() bool { return inboxtest.Effects(t, consumer.DB) == 2 })
	got, ok := seen.Of(correction)
	if !ok || got != original {
		t.Fatalf("the consumer saw the correction %s correcting %q (seen %v), want %s from the header", correction, got, ok, original)
	}
	if got, _ := seen.Of(original); got != "" {
		t.Fatalf("the original was seen as correcting %q, want no link", got)
	}
	for _, id := range []string{original, correction} {
		if n := inboxtest.InboxRows(t, consumer.DB, id); n != 1 {
			t.Fatalf("inbox rows of %s = %d, want 1", id, n)
		}
	}
	if n := inboxtest.Counter(t, reg, "consumer_duplicates_suppressed_total", "inventory"); n != 1 {
		t.Fatalf("duplicates suppressed = %g, want only the replay's", n)
	}
}

// Add refuses a Corrects that is not the id of another event.
func TestAddRefusesAMalformedCorrection(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	own := uuid.NewString()
	for name, corrects := range map[string]string{"not a uuid": "order-1", "its own id": own} {
		t.Run(name, func(t *testing.T) {
			err := sqldb.WithTx(context.Background(), db.DB, func(tx *sqlx.Tx) error {
				_, err := outbox.Add(context.Background(), tx, outbox.Event{EventID: own, AggregateID: 1, AggregateVersion: 1,
					Type: events.OrderCreated, Payload: map[string]string{"order_id": "1"}, Corrects: corrects})
				return err
			})
			if err == nil {
				t.Fatalf("Add with Corrects %q: no error", corrects)
			}
		})
	}
	if n := len(readRows(t, db.DB)); n != 0 {
		t.Fatalf("rows = %d, want none", n)
	}
}
