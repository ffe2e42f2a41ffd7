package paymentapp_test

import (
	"testing"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentapp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentbindings"
)

// The sweep asks the PSP by the key, finds no charge, and requests the
// charge again. That is a new decision, not a replay, so a correction (the
// chapter, 有限重试与死信: 如果确实需要发起新的纠正操作，应分配新事件 ID，并记录它与原事件的关系):
// the new request has an event id of its own, records the request it
// corrects (outbox corrects_event_id, sent as the header of that name),
// and the payment keeps the new one as its latest. The charge consumer
// takes it as a new event and charges once; the same message again (a
// replay) is dropped by its inbox before the PSP is asked; the first
// request, turning up late, is itself and charges nothing more.
func TestReRequestedChargeIsACorrectionOfTheRequestBefore(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	first := f.reserve(t, order, "c-1", 1500) // never consumed: lost, or a dead letter
	if first.CorrectsEventID != "" {
		t.Fatalf("the first request corrects %q, want nothing", first.CorrectsEventID)
	}
	if p := f.payment(t, order); p.RequestEventID != first.EventID {
		t.Fatalf("payment's request %q, want the first request %s", p.RequestEventID, first.EventID)
	}

	if rep := f.sweep(t); rep.Charges.Rerequested != 1 {
		t.Fatalf("sweep = %+v, want one re-request", rep.Charges)
	}
	reqs := f.outboxEvents(t, order, events.PaymentChargeRequested)
	if len(reqs) != 2 {
		t.Fatalf("charge requests = %d, want the first and the correction", len(reqs))
	}
	second := reqs[1]
	if second.EventID == first.EventID || second.CorrectsEventID != first.EventID {
		t.Fatalf("re-request %s corrects %q, want a new id correcting %s", second.EventID, second.CorrectsEventID, first.EventID)
	}
	if p := f.payment(t, order); p.RequestEventID != second.EventID {
		t.Fatalf("payment's request %q after the re-request, want %s", p.RequestEventID, second.EventID)
	}

	// As a message (its header read back by the consume path): a new event.
	if d := handle(f.charges, second); d != rabbit.Ack() {
		t.Fatalf("the correction: %v, want ack", d)
	}
	if p := f.payment(t, order); p.Status != payment.Succeeded {
		t.Fatalf("payment %s after the correction, want succeeded", p.Status)
	}
	if n := f.count(t, `SELECT COUNT(*) FROM consumer_inbox WHERE consumer_name = ? AND event_id = ?`,
		paymentbindings.PSPConsumer, second.EventID); n != 1 {
		t.Fatalf("inbox rows of the correction = %d, want 1", n)
	}

	// The correction again, same id: a replay; the inbox drops it.
	calls := f.chargeCalls.Load() + f.statusCalls.Load()
	if d := handle(f.charges, second); d != rabbit.Ack() {
		t.Fatalf("the replay: %v, want ack", d)
	}
	if now := f.chargeCalls.Load() + f.statusCalls.Load(); now != calls {
		t.Fatalf("the replay reached the PSP (%d calls, were %d): the inbox must drop a replay", now, calls)
	}
	// The first request, late (say, redriven): itself, nothing charged.
	if d := handle(f.charges, first); d != rabbit.Ack() {
		t.Fatalf("the late first request: %v, want ack", d)
	}
	if n, calls := len(f.pspCharges(t, order)), f.chargeCalls.Load(); n != 1 || calls != 1 {
		t.Fatalf("PSP charges = %d, charge calls = %d; want 1 and 1", n, calls)
	}
}

// A refund that kept failing is parked; an operator's retry requests it
// again. The operator decided: a correction of the request before it, as
// the sweep's re-request is. The refund consumer takes it as a new event
// (its header read back by the consume path) and the PSP refunds once.
func TestOperatorRetryOfARefundIsACorrection(t *testing.T) {
	t.Parallel()
	f := newFixtureAdjusted(t, func(c *paymentapp.Config) { c.RefundDeadline = time.Microsecond })
	f.charged(t, order, "c-1", 1500)
	f.cancel(t, order)
	first := f.outboxEvent(t, order, events.PaymentRefundRequested) // never consumed
	if r := f.refund(t, order); r.RequestEventID != first.EventID || first.CorrectsEventID != "" {
		t.Fatalf("refund's request %q, first corrects %q; want %s and nothing", r.RequestEventID, first.CorrectsEventID, first.EventID)
	}
	if rep := f.sweep(t); rep.Refunds.Parked != 1 {
		t.Fatalf("sweep = %+v, want the refund parked at its deadline", rep.Refunds)
	}

	res, err := f.app.Retry(f.ctx, order)
	if err != nil || res.Kind != "refund" || res.EventID == "" {
		t.Fatalf("retry = %+v, %v; want a new refund request", res, err)
	}
	reqs := f.outboxEvents(t, order, events.PaymentRefundRequested)
	if len(reqs) != 2 || reqs[1].EventID != res.EventID || reqs[1].CorrectsEventID != first.EventID {
		t.Fatalf("%d refund requests (the last %s correcting %q), want the first and %s correcting it",
			len(reqs), reqs[len(reqs)-1].EventID, reqs[len(reqs)-1].CorrectsEventID, res.EventID)
	}
	if r := f.refund(t, order); r.RequestEventID != res.EventID {
		t.Fatalf("refund's request %q after the retry, want %s", r.RequestEventID, res.EventID)
	}

	if d := f.refunds.Handle(f.ctx, inboxtest.Delivery(paymentbindings.RefundQueue, reqs[1])); d != rabbit.Ack() {
		t.Fatalf("the correction: %v, want ack", d)
	}
	if d := f.refunds.Handle(f.ctx, inboxtest.Delivery(paymentbindings.RefundQueue, reqs[1])); d != rabbit.Ack() {
		t.Fatalf("its replay: %v, want ack", d)
	}
	if p, refunds := f.payment(t, order), f.pspRefunds(t, order); p.Status != payment.Refunded || len(refunds) != 1 || f.refundCalls.Load() != 1 {
		t.Fatalf("payment %s, PSP refunds %d, refund calls %d; want refunded, 1, 1", p.Status, len(refunds), f.refundCalls.Load())
	}
}
