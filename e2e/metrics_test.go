package e2e

import (
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/sagatest"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

// The outbox metrics move as the metrics table of docs/operations.md says: a stopped
// dispatcher shows in the pending count and the oldest pending age; an
// unroutable event shows as "returned" and stays pending; once it can be
// routed it is confirmed, as a re-send.
func TestOutboxMetrics(t *testing.T) {
	t.Parallel()
	s := sagatest.Start(t)
	o := s.Order
	confirmed0 := o.Metric("outbox_publish_total", "result", "confirmed")

	gate := o.Failpoints.Pause("outbox.dispatch.before-claim", 0) // the dispatcher stops
	first := createOrder(t, s, "metrics-1", "c-1", "SKU-2", 1)
	<-gate.Reached()
	sagatest.Eventually(t, 5*time.Second, "the pending event to show", func() bool {
		return o.Metric("outbox_events", "status", "pending") == 1 && o.Metric("outbox_oldest_pending_age_seconds") > 0
	})
	o.Failpoints.Disable("outbox.dispatch.before-claim")
	waitStatus(t, s, first.OrderID, "confirmed")
	sagatest.Eventually(t, 5*time.Second, "the backlog to drain", func() bool {
		return o.Metric("outbox_events", "status", "pending") == 0 && o.Metric("outbox_oldest_pending_age_seconds") == 0
	})
	if got := o.Metric("outbox_publish_total", "result", "confirmed") - confirmed0; got < 2 {
		t.Fatalf("confirmed publishes +%g, want at least 2 (order.created and order.confirmed)", got)
	}

	// Unbind inventory from order.created: the next OrderCreated is returned.
	conn := rabbittest.Dial(t)
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	queue := s.NS.Queue("inventory.order-events")
	s.Routable(t, events.OrderCreated, false) // the contract checks' tap must not route it either
	if err := ch.QueueUnbind(queue, events.OrderCreated, s.NS.Exchange(), nil); err != nil {
		t.Fatal(err)
	}
	returned0 := o.Metric("outbox_publish_total", "result", "returned")
	resends0 := o.Metric("outbox_resends_total")
	second := createOrder(t, s, "metrics-2", "c-1", "SKU-2", 1)
	sagatest.Eventually(t, 10*time.Second, "a returned publish", func() bool {
		return o.Metric("outbox_publish_total", "result", "returned") > returned0
	})
	// The counter moves when the return arrives, before the row is put
	// back: wait until it is no longer being sent, then it must be pending.
	var status string
	sagatest.Eventually(t, 10*time.Second, "the returned event's row released", func() bool {
		o.DB.Get(&status, `SELECT status FROM outbox_events WHERE aggregate_id = ? AND event_type = 'order.created'`, second.OrderID)
		return status != "sending"
	})
	if status != "pending" {
		t.Fatalf("the returned event is %q, want pending (never marked sent)", status)
	}
	if err := ch.QueueBind(queue, events.OrderCreated, s.NS.Exchange(), false, nil); err != nil {
		t.Fatal(err)
	}
	s.Routable(t, events.OrderCreated, true)
	waitStatus(t, s, second.OrderID, "confirmed") // the retry after the backoff (1 s) is routed
	if got := o.Metric("outbox_resends_total") - resends0; got < 1 {
		t.Fatalf("outbox_resends_total +%g, want the re-send counted", got)
	}
}

// The consumer metrics: a duplicate delivery is counted as delivered and
// suppressed, not processed; business rejections and declines show in the
// services' own metrics.
func TestConsumerAndBusinessMetrics(t *testing.T) {
	t.Parallel()
	s := sagatest.Start(t)
	inv := s.Inventory
	o := createOrder(t, s, "cm-1", "c-1", "SKU-2", 1)
	waitStatus(t, s, o.OrderID, "confirmed")
	waitReservation(t, s, o.OrderID, "committed")
	delivered0 := inv.Metric("consumer_deliveries_total", "consumer", "inventory")
	processed0 := inv.Metric("consumer_processed_total", "consumer", "inventory")
	dups0 := inv.Metric("consumer_duplicates_suppressed_total", "consumer", "inventory")

	// Deliver the order's OrderCreated again (as a re-send would).
	var row struct {
		EventID string `db:"event_id"`
		Payload []byte `db:"payload"`
	}
	if err := s.Order.DB.Get(&row, `SELECT event_id, payload FROM outbox_events WHERE aggregate_id = ? AND event_type = 'order.created'`, o.OrderID); err != nil {
		t.Fatal(err)
	}
	tg := sagatest.NewTarget(t, s)
	var id uint64
	for _, c := range o.OrderID {
		id = id*10 + uint64(c-'0')
	}
	env := events.Envelope{EventID: row.EventID, Type: events.OrderCreated, AggregateID: id, AggregateVersion: 1,
		SchemaVersion: 1, CorrelationID: o.OrderID, OccurredAt: time.Now(), Payload: row.Payload}
	if err := tg.Publish(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	sagatest.Eventually(t, 10*time.Second, "the duplicate to be suppressed", func() bool {
		return inv.Metric("consumer_duplicates_suppressed_total", "consumer", "inventory") == dups0+1
	})
	if d, p := inv.Metric("consumer_deliveries_total", "consumer", "inventory")-delivered0,
		inv.Metric("consumer_processed_total", "consumer", "inventory")-processed0; d != 1 || p != 0 {
		t.Fatalf("deliveries +%g, processed +%g; want +1 and +0", d, p)
	}

	rejected0 := inv.Metric("inventory_reservations_rejected_total")
	r := createOrder(t, s, "cm-2", "c-1", "SKU-SOLDOUT", 1)
	waitStatus(t, s, r.OrderID, "rejected")
	if got := inv.Metric("inventory_reservations_rejected_total") - rejected0; got != 1 {
		t.Fatalf("inventory_reservations_rejected_total +%g, want +1", got)
	}
	declined0 := s.Payment.Metric("payment_payments", "status", "failed")
	d := createOrder(t, s, "cm-3", "decline-9", "SKU-2", 1)
	waitStatus(t, s, d.OrderID, "cancelled")
	if got := s.Payment.Metric("payment_payments", "status", "failed") - declined0; got != 1 {
		t.Fatalf("payment_payments{status=failed} +%g, want +1", got)
	}
}
