package orderapp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/services/order/internal/order"
)

// processed puts an inbox row for eventID in the peer's inbox (what
// GET /admin/inbox answers).
func (p *peer) processed(consumer, eventID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inbox = append(p.inbox, map[string]any{"consumer": consumer, "event_id": eventID, "processed_at": time.Now().UTC()})
}

// A confirmed order whose order.confirmed inventory processed (its inbox
// has it) while its reservation is still reserved: the state a dedupe
// record committed apart from its business change leaves (the third ACK
// pitfall), or a handler that recorded the wrong state. The same event_id
// again would be dropped by that inbox, so the reconciler writes a
// correction (the chapter, 有限重试与死信: 需要发起新的纠正操作，应分配新事件 ID，并记录它与
// 原事件的关系): a new order.confirmed with a new event_id, the same payload,
// the order's next version and corrects_event_id the original, which is
// left as it was. The order's status and updated_at do not move. Once
// inventory shows the sale, the next run closes the order.
func TestReconcilerCorrectsAnEventTheParticipantProcessedWithoutItsEffect(t *testing.T) {
	t.Parallel()
	r := newRecon(t)
	o, sent := r.confirmNotApplied(t, "confirm-unapplied")
	r.inventory.processed("inventory", sent.EventID)
	before := r.status(t, o.ID)

	sum := r.run(t)
	if len(sum.Repairs) != 1 || len(sum.Errors) != 0 {
		t.Fatalf("summary = %+v, want one repair", sum)
	}
	if rep := sum.Repairs[0]; rep.Classification != "not_applied" || rep.Action != "correct_event" || rep.Outcome != "repaired" {
		t.Fatalf("repair = %+v, want not_applied / correct_event / repaired", rep)
	}
	rows := outboxOf(r.fixture, t, o.ID, events.OrderConfirmed)
	if len(rows) != 2 || rows[0].EventID != sent.EventID || rows[0].Status != "sent" {
		t.Fatalf("order.confirmed rows = %+v, want the original, still sent, and a correction", rows)
	}
	corr := rows[1]
	if corr.EventID == sent.EventID || corr.Status != "pending" || corr.Version != before.Version+1 ||
		!bytes.Equal(compactJSON(t, corr.Payload), compactJSON(t, sent.Payload)) {
		t.Fatalf("correction = %+v, want a new event_id, pending, version %d, the original's payload %s",
			corr, before.Version+1, sent.Payload)
	}
	all, err := outbox.OfAggregate(context.Background(), r.db, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range all {
		switch {
		case row.EventID == corr.EventID && (row.CorrectsEventID == nil || *row.CorrectsEventID != sent.EventID):
			t.Fatalf("correction %s corrects %v, want %s", corr.EventID, row.CorrectsEventID, sent.EventID)
		case row.EventID != corr.EventID && row.CorrectsEventID != nil:
			t.Fatalf("event %s (%s) corrects %s, want no link", row.EventID, row.EventType, *row.CorrectsEventID)
		}
	}
	after := r.status(t, o.ID)
	if after.Status != order.Confirmed || after.Version != before.Version+1 || !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Fatalf("order after the correction = %s v%d updated %v, want confirmed v%d updated %v (unchanged)",
			after.Status, after.Version, after.UpdatedAt, before.Version+1, before.UpdatedAt)
	}
	var ev struct {
		Inbox struct {
			Service   string `json:"service"`
			EventID   string `json:"event_id"`
			Processed bool   `json:"processed"`
		} `json:"participant_inbox"`
	}
	a := r.audits(t, o.ID)
	if len(a) != 1 || json.Unmarshal(a[0].Evidence, &ev) != nil || ev.Inbox.Service != "inventory" ||
		ev.Inbox.EventID != sent.EventID || !ev.Inbox.Processed {
		t.Fatalf("audit rows = %+v, want one whose evidence has inventory's inbox answer", a)
	}

	// Inventory applied the correction: the next run closes the order.
	r.inventory.set(o.ID, reservation(order.ResCommitted))
	if sum := r.run(t); sum.Closed != 1 || len(sum.Repairs) != 0 {
		t.Fatalf("run after the correction = %+v, want the order closed", sum)
	}
}

// The participant's inbox does not have our event, or cannot be asked:
// the repair stays a replay, the same row and event_id (resend_event),
// with no new row.
func TestReconcilerReplaysAnEventTheParticipantNeverProcessed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		broken bool // inventory's /admin/inbox answers 500
	}{{"not in the inbox", false}, {"the inbox cannot be asked", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRecon(t)
			o, sent := r.confirmNotApplied(t, "confirm-lost")
			r.inventory.processed("inventory", "another-event")
			if tc.broken {
				r.inventory.failInbox(http.StatusInternalServerError)
			}

			sum := r.run(t)
			wantOneRepair(t, sum, "not_consumed", "resend_event", "repaired")
			if n := r.inventory.hit("GET /admin/inbox"); n != 1 {
				t.Fatalf("inventory's inbox asked %d times, want once before the replay", n)
			}
			rows := outboxOf(r.fixture, t, o.ID, events.OrderConfirmed)
			if len(rows) != 1 || rows[0].EventID != sent.EventID || rows[0].Status != "pending" {
				t.Fatalf("order.confirmed rows = %+v, want the same event (%s) back to pending", rows, sent.EventID)
			}
		})
	}
}

func compactJSON(t *testing.T, raw []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
