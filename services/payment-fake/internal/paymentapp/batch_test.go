package paymentapp_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentbindings"
)

// Four charge requests reach the PSP consumer at once, one of them for a
// customer the PSP declines. Each is charged once at the PSP, before the
// transaction; the four outcomes are recorded in one transaction, each
// payment read (locked) once for the batch: three payments succeeded and
// one failed, each with its result event, and no batch rolled back.
func TestChargesInOneBatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 0)
	reg := prometheus.NewRegistry()
	_, charges := f.consumer(paymentbindings.PSPConsumer, paymentbindings.PSPHandlers(f.app), reg)
	customers := []string{"c-1", "c-2", "decline-3", "c-4"}
	ds := make([]rabbit.Delivery, len(customers))
	for i, c := range customers {
		ds[i] = inboxtest.Delivery(paymentbindings.PSPQueue, f.reserve(t, uint64(100+i), c, 2500))
	}
	for i, d := range charges.HandleBatch(f.ctx, ds) {
		if d != rabbit.Ack() {
			t.Fatalf("charge %d: decision %+v, want ack", i, d)
		}
	}

	if n := f.chargeCalls.Load(); n != 4 {
		t.Errorf("PSP received %d charges, want 4 (one per order)", n)
	}
	for i, c := range customers {
		id := uint64(100 + i)
		want, event := payment.Succeeded, events.PaymentSucceeded
		if c == "decline-3" {
			want, event = payment.Failed, events.PaymentFailed
		}
		if p := f.payment(t, id); p.Status != want {
			t.Errorf("payment %d: %s, want %s", id, p.Status, want)
		}
		if got := len(f.outboxEvents(t, id, event)); got != 1 {
			t.Errorf("order %d: %d %s events, want 1", id, got, event)
		}
	}
	inboxtest.WantCounter(t, reg, "consumer_batches_total", paymentbindings.PSPConsumer, 1)
	inboxtest.WantCounter(t, reg, "consumer_batch_fallbacks_total", paymentbindings.PSPConsumer, 0)
}
