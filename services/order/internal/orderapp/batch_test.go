package orderapp_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/services/order/internal/order"
)

// The participants' results for several orders, handed to the consumer as
// a worker takes them (CONSUMER_BATCH 1 and 16), with a result for an
// order that does not exist among them (a permanent failure: at 16 its
// batch rolls back and the others commit one at a time). Every order ends
// as one message at a time would leave it, with its events once.
func TestResultsInBatches(t *testing.T) {
	t.Parallel()
	for _, batch := range inboxtest.Batches {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			ctx := context.Background()
			var os []order.Order
			for i := 0; i < 4; i++ {
				o, _, err := f.app.Create(ctx, fmt.Sprintf("k%d", i), twoKeyboards)
				if err != nil {
					t.Fatal(err)
				}
				os = append(os, o)
			}
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
		})
	}
}

// handleInBatches hands es to the consumer batch at a time. Every delivery
// is acked: processed, or the unknown order's, a dead letter.
func (f *fixture) handleInBatches(t *testing.T, batch int, es []events.Envelope) {
	t.Helper()
	for len(es) > 0 {
		n := min(batch, len(es))
		ds := make([]rabbit.Delivery, n)
		for i, e := range es[:n] {
			m := rabbit.FromEnvelope("saga.events", e)
			ds[i] = rabbit.Delivery{Queue: "order.saga-results", Attempt: 1}
			ds[i].MessageId, ds[i].Type, ds[i].ContentType = m.Publishing.MessageId, m.Publishing.Type, m.Publishing.ContentType
			ds[i].Headers, ds[i].Body, ds[i].RoutingKey = m.Publishing.Headers, m.Publishing.Body, m.RoutingKey
		}
		for i, d := range f.cons.HandleBatch(context.Background(), ds) {
			if d != rabbit.Ack() {
				t.Fatalf("%s of order %d: decision %+v, want ack", es[i].Type, es[i].AggregateID, d)
			}
		}
		es = es[n:]
	}
}
