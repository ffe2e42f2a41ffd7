package e2e

import (
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/sagatest"
)

// A confirmed order whose order.confirmed inventory recorded as processed
// without its effect: the state a dedupe record committed apart from its
// business change leaves (the third ACK pitfall), made here by hand while
// inventory is down: its inbox row for the event, and the message gone.
// The reservation stays reserved, and a replay (the same event_id) would
// be dropped by that inbox. The reconciler asks inventory's inbox before
// replaying, and writes a correction instead (the chapter, 有限重试与死信:
// 需要发起新的纠正操作，应分配新事件 ID，并记录它与原事件的关系): a new order.confirmed with a
// new event_id and corrects_event_id the original. Inventory takes it as a
// new event and commits the sale once; the timeline shows the relation;
// the next run closes the order.
func TestReconcilerCorrectsAConfirmInventoryProcessedWithoutItsEffect(t *testing.T) {
	t.Parallel()
	s := startReconcilingByHand(t, sagatest.WithEnv("inventory", "RESERVATION_TTL", "2m"))
	before := stock(t, s, "SKU-1")

	o, dropped := confirmDroppedOnItsWayToInventory(t, s, "confirm-unapplied-1")
	original := dropped.MessageId
	s.Inventory.DB.MustExec(`INSERT INTO consumer_inbox (consumer_name, event_id) VALUES ('inventory', ?)`, original)
	s.Inventory.Start()
	var r reservationJSON
	if s.Inventory.Do("GET", "/reservations/"+o.OrderID, nil, nil, &r); r.Status != "reserved" {
		t.Fatalf("reservation %s, want still reserved", r.Status)
	}
	time.Sleep(300 * time.Millisecond) // past the grace window

	sum := reconcileNow(t, s)
	if len(sum.Repairs) != 1 || len(sum.Errors) != 0 {
		t.Fatalf("run summary = %+v, want the order repaired", sum)
	}
	if rep := sum.Repairs[0]; rep.Classification != "not_applied" || rep.Action != "correct_event" || rep.Outcome != "repaired" {
		t.Fatalf("repair = %+v, want not_applied / correct_event / repaired", rep)
	}
	sagatest.Eventually(t, 30*time.Second, "inventory to commit the sale", func() bool {
		s.Inventory.Do("GET", "/reservations/"+o.OrderID, nil, nil, &r)
		return r.Status == "committed"
	})
	if after := stock(t, s, "SKU-1"); after.OnHand != before.OnHand-2 || after.Reserved != 0 {
		t.Fatalf("stock %+v, want on_hand %d and nothing reserved: sold once", after, before.OnHand-2)
	}

	checkCorrectionNamesTheOriginal(t, s, o.OrderID, original)

	time.Sleep(300 * time.Millisecond)
	if sum = reconcileNow(t, s); sum.Closed != 1 || len(sum.Repairs) != 0 {
		t.Fatalf("run after the correction = %+v, want the order closed", sum)
	}
}

// checkCorrectionNamesTheOriginal: the order's outbox holds the original
// order.confirmed, untouched, and a correction with an event_id of its own
// naming it; inventory's inbox took each once; the timeline shows the link.
func checkCorrectionNamesTheOriginal(t *testing.T, s *sagatest.Saga, orderID, original string) {
	t.Helper()
	// The order's outbox: the original, untouched, and the correction.
	var rows []struct {
		EventID  string  `db:"event_id"`
		Status   string  `db:"status"`
		Corrects *string `db:"corrects_event_id"`
	}
	sagatest.Eventually(t, 15*time.Second, "the correction to be sent", func() bool {
		rows = rows[:0]
		if err := s.Order.DB.Select(&rows, `SELECT event_id, status, corrects_event_id FROM outbox_events
WHERE aggregate_id = ? AND event_type = 'order.confirmed' ORDER BY aggregate_version`, orderID); err != nil {
			t.Fatal(err)
		}
		return len(rows) == 2 && rows[1].Status == "sent"
	})
	correction := rows[1].EventID
	if rows[0].EventID != original || rows[0].Corrects != nil || correction == original ||
		rows[1].Corrects == nil || *rows[1].Corrects != original {
		t.Fatalf("order.confirmed rows = %+v, want %s and a correction of it", rows, original)
	}
	// Inventory's inbox: each event once, the correction as a new one.
	for _, id := range []string{original, correction} {
		var n int
		if err := s.Inventory.DB.Get(&n, `SELECT COUNT(*) FROM consumer_inbox WHERE consumer_name = 'inventory' AND event_id = ?`, id); err != nil || n != 1 {
			t.Fatalf("inventory inbox rows of %s = %d (%v), want 1", id, n, err)
		}
	}
	tl := timeline(t, s, orderID)
	linked := false
	for _, e := range tl.Entries {
		if e.Kind == "outbox.written" && e.Detail["event_id"] == correction && e.Detail["corrects_event_id"] == original {
			linked = true
		}
	}
	if !linked {
		t.Fatalf("the timeline does not show the correction naming %s:\n%s", original, tl)
	}
}
