package orderapp_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderapp"
	"github.com/relmsg/ordersaga/services/order/internal/orderbindings"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
)

// The participants' results for several orders, handed to the consumer as
// a worker takes them (CONSUMER_BATCH 1 and 16), with a result for an
// order that does not exist among them (a permanent failure: at 16 its
// batch rolls back and the others commit one at a time). Every order ends
// as one message at a time would leave it, with its events once.
func TestResultsInBatches(t *testing.T) {
	t.Parallel()
	inboxtest.EachBatch(t, func(t *testing.T, batch int) {
		f := newFixture(t)
		reg := prometheus.NewRegistry()
		f.cons = newConsumer(f.db, f.app, reg)
		os := f.createOrders(t, 4)
		succeeded := func(o order.Order) events.Envelope {
			return envelope(t, events.PaymentSucceeded, o.ID, events.PaymentSucceededV1{OrderID: o.ID,
				AmountCents: o.TotalCents, Currency: "EUR", ChargeID: fmt.Sprint("ch_", o.ID)})
		}
		unknown := envelope(t, events.InventoryRejected, 999, events.InventoryRejectedV1{OrderID: 999})
		f.handleInBatches(t, batch, []events.Envelope{reserved(t, os[0]), reserved(t, os[1]), unknown, reserved(t, os[2]),
			envelope(t, events.InventoryRejected, os[3].ID, events.InventoryRejectedV1{OrderID: os[3].ID, Reason: "insufficient stock"})})
		f.handleInBatches(t, batch, []events.Envelope{succeeded(os[0]),
			envelope(t, events.PaymentFailed, os[1].ID, events.PaymentFailedV1{OrderID: os[1].ID, Reason: "card_declined"}),
			succeeded(os[2])})

		want := []order.Status{order.Confirmed, order.Cancelled, order.Confirmed, order.Rejected}
		for i, o := range os {
			if s := f.status(t, o.ID).Status; s != want[i] {
				t.Errorf("order %d: %s, want %s", o.ID, s, want[i])
			}
		}
		counts := map[string]int{}
		for _, r := range f.outbox(t) {
			counts[r.Type]++
		}
		wantCounts := map[string]int{events.OrderCreated: 4, events.OrderConfirmed: 2, events.OrderCancelled: 1}
		if fmt.Sprint(counts) != fmt.Sprint(wantCounts) {
			t.Errorf("outbox events %v, want %v", counts, wantCounts)
		}
		if n := f.count(t, "consumer_inbox"); n != 7 {
			t.Errorf("inbox rows = %d, want 7 (every event but the unknown order's)", n)
		}
		// At 16 the first take rolls back (the unknown order) and the
		// second commits as one batch; at 1 every event is alone.
		wantBatches, wantFallbacks := 0.0, 0.0
		if batch > 1 {
			wantBatches, wantFallbacks = 1, 1
		}
		inboxtest.WantCounter(t, reg, "consumer_batches_total", orderbindings.ConsumerName, wantBatches)
		inboxtest.WantCounter(t, reg, "consumer_batch_fallbacks_total", orderbindings.ConsumerName, wantFallbacks)
	})
}

// handleInBatches hands es to the consumer batch at a time. Every delivery
// is acked: processed, or the unknown order's, a dead letter.
func (f *fixture) handleInBatches(t *testing.T, batch int, es []events.Envelope) {
	t.Helper()
	for len(es) > 0 {
		n := min(batch, len(es))
		for i, d := range f.cons.HandleBatch(context.Background(), deliveriesOf(es[:n])) {
			if d != rabbit.Ack() {
				t.Fatalf("%s of order %d: decision %+v, want ack", es[i].Type, es[i].AggregateID, d)
			}
		}
		es = es[n:]
	}
}

// deliveriesOf is es as the order service's queue delivers them.
func deliveriesOf(es []events.Envelope) []rabbit.Delivery {
	ds := make([]rabbit.Delivery, len(es))
	for i, e := range es {
		ds[i] = inboxtest.Delivery("order.saga-results", e)
	}
	return ds
}

// createOrders creates n orders of twoKeyboards, keys k0, k1, ...
func (f *fixture) createOrders(t *testing.T, n int) []order.Order {
	t.Helper()
	os := make([]order.Order, n)
	for i := range os {
		os[i] = f.create(t, fmt.Sprintf("k%d", i))
	}
	return os
}

// A batch of results, two of them for one order, writes each move's
// order_history row as one message at a time would (from, to, trigger, the
// consumed event, the emitted event), in delivery order and in one
// statement, before the events the moves emitted. A batch that rolls back
// leaves no history row; its redelivery writes each row once.
func TestHistoryOfABatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	f.cons = newConsumer(f.db, f.app, reg)
	os := f.createOrders(t, 3)
	a, b, c := os[0], os[1], os[2]
	es := []events.Envelope{reserved(t, a), reserved(t, b),
		envelope(t, events.InventoryRejected, c.ID, events.InventoryRejectedV1{OrderID: c.ID, Reason: "insufficient stock"}),
		envelope(t, events.PaymentSucceeded, a.ID, events.PaymentSucceededV1{OrderID: a.ID, AmountCents: a.TotalCents,
			Currency: "EUR", ChargeID: "ch_1"})}

	// The batch fails right before its COMMIT, and so does each event on
	// its own after it: nothing of theirs stays.
	fp := failpoint.NewRegistry()
	fp.Error("inbox.after-effect-before-commit", 1+len(es))
	for i, d := range f.cons.HandleBatch(failpoint.WithRegistry(ctx, fp), deliveriesOf(es)) {
		if d == rabbit.Ack() {
			t.Fatalf("event %d acked, want it back for another try", i)
		}
	}
	inboxtest.WantCounter(t, reg, "consumer_batch_fallbacks_total", orderbindings.ConsumerName, 1)
	if rows := f.consumerHistory(t); len(rows) != 0 {
		t.Fatalf("history after the rollback: %+v, want none", rows)
	}
	for _, o := range os {
		if s := f.status(t, o.ID).Status; s != order.PendingInventory {
			t.Fatalf("order %d: %s after the rollback, want pending_inventory", o.ID, s)
		}
	}

	// Redelivered, the batch commits.
	f.handleInBatches(t, len(es), es)
	inboxtest.WantCounter(t, reg, "consumer_batches_total", orderbindings.ConsumerName, 1)
	confirmed := outboxOf(f, t, a.ID, events.OrderConfirmed)
	if len(confirmed) != 1 {
		t.Fatalf("order.confirmed rows of order %d: %d, want 1", a.ID, len(confirmed))
	}
	checkBatchHistory(t, f.consumerHistory(t), []orderdb.Change{
		{OrderID: a.ID, From: "pending_inventory", To: "awaiting_payment", Trigger: "inventory_reserved", EventID: &es[0].EventID},
		{OrderID: b.ID, From: "pending_inventory", To: "awaiting_payment", Trigger: "inventory_reserved", EventID: &es[1].EventID},
		{OrderID: c.ID, From: "pending_inventory", To: "rejected", Trigger: "inventory_rejected", Reason: "insufficient stock",
			EventID: &es[2].EventID},
		{OrderID: a.ID, From: "awaiting_payment", To: "confirmed", Trigger: "payment_succeeded", EventID: &es[3].EventID,
			EmittedEventID: &confirmed[0].EventID},
	})

	// The timeline shows the confirm before the event it emitted.
	tl, err := f.app.Timeline(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range tl.Entries {
		if e.Kind == orderapp.KindOrderTransition || e.Kind == orderapp.KindOutboxWritten {
			kinds = append(kinds, fmt.Sprint(e.Kind, " ", e.Detail["to"], e.Detail["event_type"]))
		}
	}
	wantKinds := []string{"outbox.written <nil>order.created", "order.transition awaiting_payment<nil>",
		"order.transition confirmed<nil>", "outbox.written <nil>order.confirmed"}
	if fmt.Sprint(kinds) != fmt.Sprint(wantKinds) {
		t.Errorf("timeline of order %d: %q, want %q", a.ID, kinds, wantKinds)
	}
}

// consumerHistory is the order_history rows the consumer wrote, of every
// order, in the order they were written.
func (f *fixture) consumerHistory(t *testing.T) []orderdb.Change {
	t.Helper()
	return selectAll[orderdb.Change](t, f.db, `SELECT order_id, from_status, to_status, trigger_name, actor, reason, event_id,
  emitted_event_id, changed_at FROM order_history WHERE actor = ? ORDER BY id`, orderapp.ActorConsumer)
}

// checkBatchHistory compares the consumer's history rows with want, and
// checks that one statement wrote them all (one changed_at).
func checkBatchHistory(t *testing.T, rows, want []orderdb.Change) {
	t.Helper()
	if len(rows) != len(want) {
		t.Fatalf("history rows %+v, want %d", rows, len(want))
	}
	for i, w := range want {
		r := rows[i]
		if r.OrderID != w.OrderID || r.From != w.From || r.To != w.To || r.Trigger != w.Trigger || r.Actor != orderapp.ActorConsumer ||
			r.Reason != w.Reason || deref(r.EventID) != deref(w.EventID) || deref(r.EmittedEventID) != deref(w.EmittedEventID) {
			t.Errorf("history row %d: order %d %s -> %s by %s (%s) reason %q event %s emitted %s\n"+
				"want order %d %s -> %s by %s (consumer) reason %q event %s emitted %s", i,
				r.OrderID, r.From, r.To, r.Trigger, r.Actor, r.Reason, deref(r.EventID), deref(r.EmittedEventID),
				w.OrderID, w.From, w.To, w.Trigger, w.Reason, deref(w.EventID), deref(w.EmittedEventID))
		}
		// One statement wrote them: one changed_at.
		if !r.ChangedAt.Equal(rows[0].ChangedAt) {
			t.Errorf("history row %d changed at %v, row 0 at %v: want one INSERT for the batch", i, r.ChangedAt, rows[0].ChangedAt)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
