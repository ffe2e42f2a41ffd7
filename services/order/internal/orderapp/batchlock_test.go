package orderapp_test

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderbindings"
)

// One batch holds both results of each of three orders (reserved, then
// paid). The orders of the batch are locked in one read; the second event
// of an order must decide on the order as the first left it, not on that
// read: every order ends confirmed through awaiting_payment, in one
// transaction, with no batch rolled back for a stale order.
func TestBatchLocksItsOrdersOnceAndDecidesOnTheirLatestState(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	reg := prometheus.NewRegistry()
	f.cons = newConsumer(f.db, f.app, reg)
	os := f.createOrders(t, 3)
	var es []events.Envelope
	for _, o := range os {
		es = append(es, reserved(t, o))
	}
	for _, o := range os {
		es = append(es, envelope(t, events.PaymentSucceeded, o.ID, events.PaymentSucceededV1{OrderID: o.ID,
			AmountCents: o.TotalCents, Currency: "EUR", ChargeID: fmt.Sprint("ch_", o.ID)}))
	}
	f.handleInBatches(t, 16, es)

	for _, o := range os {
		if s := f.status(t, o.ID).Status; s != order.Confirmed {
			t.Errorf("order %d: %s, want confirmed", o.ID, s)
		}
		var path []string
		for _, h := range f.history(t, o.ID) {
			path = append(path, h.From+">"+h.To)
		}
		if got, want := fmt.Sprint(path), "[>pending_inventory pending_inventory>awaiting_payment awaiting_payment>confirmed]"; got != want {
			t.Errorf("order %d history %s, want %s", o.ID, got, want)
		}
	}
	inboxtest.WantCounter(t, reg, "consumer_batches_total", orderbindings.ConsumerName, 1)
	inboxtest.WantCounter(t, reg, "consumer_batch_fallbacks_total", orderbindings.ConsumerName, 0)
}
