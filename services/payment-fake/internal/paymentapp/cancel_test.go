package paymentapp_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentapp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymenttest"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp"
)

// The cancel overtook inventory.reserved: nothing to refund (a null
// compensation), but a marker stays, and the late inventory.reserved is
// recorded on it as stale and charges nothing (the hanging protection).
func TestCancelBeforeReservedLeavesMarkerAndChargesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)

	f.cancel(t, order)
	m := f.payment(t, order)
	if m.Status != payment.CancelledBeforeCharge || !m.IsMarker() || !m.CancelRequested || m.Version != 0 ||
		!strings.Contains(m.CancelReason, "cancelled before inventory.reserved arrived (order cancelled: customer asked)") {
		t.Fatalf("marker = %+v, want cancelled_before_charge, no amount, version 0, with the reason", m)
	}
	if rows := f.outbox(t); len(rows) != 0 {
		t.Fatalf("outbox = %v, want nothing (no event for a null compensation)", rows)
	}

	late := paymenttest.Reserved(order, "c-1", 1500)
	if err := f.saga.Process(f.ctx, late); err != nil {
		t.Fatalf("late inventory.reserved: %v, want processed (a stale event is a result, not an error)", err)
	}
	m = f.payment(t, order)
	if m.Status != payment.CancelledBeforeCharge || m.AmountCents != 0 ||
		!strings.Contains(m.CancelReason, "late inventory.reserved "+late.EventID+" ignored, nothing charged") {
		t.Errorf("marker after the late event = %+v, want unchanged but for the stale note", m)
	}
	// A second cancel and another copy of the late event change nothing.
	f.cancel(t, order)
	if err := f.saga.Process(f.ctx, paymenttest.Reserved(order, "c-1", 1500)); err != nil {
		t.Fatal(err)
	}
	if got := f.payment(t, order); got.CancelReason != m.CancelReason || got.Status != m.Status {
		t.Errorf("payment after repeats = %+v, want %+v", got, m)
	}
	if rows := f.outbox(t); len(rows) != 0 {
		t.Errorf("outbox = %v, want no charge request", rows)
	}
	if rep := f.sweep(t); rep.Charges.Claimed != 0 {
		t.Errorf("sweep claimed %d payments, want 0 (a marker is not pending)", rep.Charges.Claimed)
	}
	if n := len(f.pspCharges(t, order)); n != 0 || f.chargeCalls.Load() != 0 {
		t.Errorf("PSP charges = %d, charge calls = %d; want 0 and 0", n, f.chargeCalls.Load())
	}
}

// The charge is at the PSP (in flight, paused after the PSP's answer) when
// the cancel arrives. The payment is pending, so the cancel is remembered;
// the success is then recorded together with the refund request, in one
// transaction. The refund consumer refunds the full amount and the order
// service hears payment.refunded.
func TestCancelWhileChargeInFlightIsRefunded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	cmd := f.reserve(t, order, "c-1", 1500)
	gate := f.failpoint.Pause(paymentapp.FailpointAfterPSPCall, 1)
	done := make(chan error, 1)
	go func() { done <- f.charges.Process(f.ctx, cmd) }()
	<-gate.Reached() // the PSP has charged; the outcome is not recorded

	f.cancel(t, order)
	if p := f.payment(t, order); p.Status != payment.Pending || !p.CancelRequested {
		t.Fatalf("payment while the charge is in flight = %+v, want pending with the cancel remembered", p)
	}
	if got := f.outboxTypes(t, order); fmt.Sprint(got) != "[1 payment.charge-requested]" {
		t.Fatalf("outbox after the cancel = %v, want only the charge request (no refund before the outcome)", got)
	}

	gate.Release()
	if err := <-done; err != nil {
		t.Fatalf("record the charge: %v", err)
	}
	charges := f.pspCharges(t, order)
	if len(charges) != 1 || charges[0].Status != psp.StatusSucceeded {
		t.Fatalf("PSP charges = %+v, want one succeeded", charges)
	}
	p := f.payment(t, order)
	if p.Status != payment.Succeeded || p.PSPChargeID != charges[0].ChargeID || p.Version != 3 {
		t.Errorf("payment = %+v, want succeeded, version 3", p)
	}
	// The outcome and the refund request committed together.
	want := "[1 payment.charge-requested 2 payment.succeeded 3 payment.refund-requested]"
	if got := f.outboxTypes(t, order); fmt.Sprint(got) != want {
		t.Fatalf("outbox = %v, want %s", got, want)
	}
	r := f.refund(t, order)
	if r.Status != payment.RefundRequested || r.AmountCents != 1500 || r.IdempotencyKey != "refund-42" ||
		r.PSPChargeID != charges[0].ChargeID || !strings.Contains(r.Reason, "customer asked") {
		t.Errorf("refund = %+v, want requested, 1500, key refund-42, charge %s", r, charges[0].ChargeID)
	}

	f.completeRefund(t, order, 1500)
}

// A first charge attempt reached the PSP but was not recorded (the process
// failed after the PSP's answer); then the order was cancelled. The retry
// starts no new charge for a cancelled order: it only asks the PSP with the
// key, finds the charge, records it and requests the refund.
func TestCancelAfterUnrecordedChargeQueriesAndRefunds(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	cmd := f.reserve(t, order, "c-1", 1500)
	f.failAfterPSPCall(t, cmd)
	f.cancel(t, order)

	if err := f.charges.Process(f.ctx, cmd); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if c, s := f.chargeCalls.Load(), f.statusCalls.Load(); c != 1 || s != 1 {
		t.Errorf("PSP calls: %d charges, %d status queries; want 1 (the first attempt) and 1 (the retry)", c, s)
	}
	if got, want := fmt.Sprint(f.outboxTypes(t, order)), "[1 payment.charge-requested 2 payment.succeeded 3 payment.refund-requested]"; got != want {
		t.Fatalf("outbox = %s, want %s", got, want)
	}
	f.completeRefund(t, order, 1500)
}

// The charge was sent, but its answer never came back (the PSP has no
// charge with the key), and then the order is cancelled: the payment stays
// pending with the cancel remembered, no charge is started for it (the
// charge request, redelivered, only queries), and the sweep settles it by
// a status query: inside the in-flight window (PAYMENT_CANCEL_SETTLE) it
// waits, because the charge sent may still land; after it, or at the
// deadline, the PSP still having no charge, it is closed as
// cancelled_before_charge. Nothing charged, nothing to refund.
func TestCancelOfAChargeInFlightIsSettledByAStatusQuery(t *testing.T) {
	t.Parallel()
	t.Run("inside the in-flight window: waits", func(t *testing.T) {
		t.Parallel()
		f := newFixtureAdjusted(t, func(c *paymentapp.Config) { c.CancelSettle = time.Hour })
		cmd := f.reserve(t, order, "c-1", 1500)
		f.markSent(t, order)
		f.cancel(t, order)
		if err := f.charges.Process(f.ctx, cmd); err != nil {
			t.Fatal(err)
		}
		if c, s := f.chargeCalls.Load(), f.statusCalls.Load(); c != 0 || s != 1 {
			t.Errorf("PSP calls: %d charges, %d status queries; want 0 and 1", c, s)
		}
		if p := f.payment(t, order); p.Status != payment.Pending || !p.CancelRequested {
			t.Errorf("payment = %+v, want pending with the cancel remembered", p)
		}
		rep := f.sweep(t)
		if rep.Charges.Claimed != 1 || rep.Charges.Waiting != 1 {
			t.Errorf("sweep = %+v, want the payment claimed and left waiting", rep.Charges)
		}
		if n := len(f.outboxEvents(t, order, events.PaymentChargeRequested)); n != 1 {
			t.Errorf("charge requests = %d, want 1 (no re-request for a cancelled order)", n)
		}
	})
	for _, tt := range []struct {
		name      string
		settle    time.Duration
		deadline  time.Duration
		reasonHas string
	}{
		{"after the in-flight window: closed", time.Microsecond, time.Hour, "after it was last sent: nothing charged"},
		{"at the deadline: closed", time.Hour, time.Microsecond, "at the deadline: nothing charged"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixtureAdjusted(t, func(c *paymentapp.Config) { c.CancelSettle, c.ChargeDeadline = tt.settle, tt.deadline })
			f.reserve(t, order, "c-1", 1500)
			f.markSent(t, order)
			f.cancel(t, order)
			rep := f.sweep(t)
			if rep.Charges.Voided != 1 {
				t.Fatalf("sweep = %+v, want the payment voided", rep.Charges)
			}
			p := f.payment(t, order)
			if p.Status != payment.CancelledBeforeCharge || p.IsMarker() || !strings.Contains(p.ParkedReason, tt.reasonHas) {
				t.Errorf("payment = %+v, want cancelled_before_charge with a reason saying %q", p, tt.reasonHas)
			}
			if got := fmt.Sprint(f.outboxTypes(t, order)); got != "[1 payment.charge-requested]" {
				t.Errorf("outbox = %s, want the charge request only", got)
			}
			if n := len(f.pspCharges(t, order)); n != 0 || f.chargeCalls.Load() != 0 {
				t.Errorf("PSP charges = %d, calls = %d, want 0", n, f.chargeCalls.Load())
			}
			if v := f.metric(t, "payment_needs_attention", "kind", "charge"); v != 0 {
				t.Errorf("payment_needs_attention{charge} = %v, want 0 (closed, not parked)", v)
			}
		})
	}
}

// The PSP charged, the outcome was not recorded (the process failed after
// the PSP's answer), and the order is cancelled: the sweep's status query,
// at the end of the in-flight window, finds the charge, records it and
// requests the refund in the same transaction.
func TestCancelOfAChargeInFlightFoundByTheSweepIsRefunded(t *testing.T) {
	t.Parallel()
	f := newFixtureAdjusted(t, func(c *paymentapp.Config) { c.CancelSettle = time.Microsecond })
	cmd := f.reserve(t, order, "c-1", 1500)
	f.failAfterPSPCall(t, cmd)
	f.cancel(t, order)
	if rep := f.sweep(t); rep.Charges.Resolved != 1 {
		t.Fatalf("sweep = %+v, want the outcome resolved", rep.Charges)
	}
	// (The same round then looks at the new refund, due at once with this
	// fixture's grace, and requests it again with the same key.)
	if got, want := fmt.Sprint(f.outboxTypes(t, order)), "[1 payment.charge-requested 2 payment.succeeded 3 payment.refund-requested"; !strings.HasPrefix(got, want) {
		t.Fatalf("outbox = %s, want it to start with %s]", got, want)
	}
	if p := f.payment(t, order); p.Status != payment.Succeeded || !p.CancelRequested || f.chargeCalls.Load() != 1 {
		t.Fatalf("payment = %+v after %d charge calls, want succeeded with the cancel, one charge", p, f.chargeCalls.Load())
	}
	f.completeRefund(t, order, 1500)
}

// A confirmed order is cancelled: a new business transaction, the refund.
// A second cancel (another event id) requests nothing more.
func TestCancelAfterSucceededRefunds(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	f.charged(t, order, "c-1", 2500)
	f.cancel(t, order)
	f.cancel(t, order)

	if got, want := fmt.Sprint(f.outboxTypes(t, order)), "[1 payment.charge-requested 2 payment.succeeded 3 payment.refund-requested]"; got != want {
		t.Fatalf("outbox = %s, want %s", got, want)
	}
	req := decode[events.PaymentRefundRequestedV1](t, f.outboxEvent(t, order, events.PaymentRefundRequested).Payload)
	charge := f.pspCharges(t, order)[0]
	if want := (events.PaymentRefundRequestedV1{OrderID: order, ChargeID: charge.ChargeID, AmountCents: 2500,
		IdempotencyKey: "refund-42"}); req != want {
		t.Errorf("refund request = %+v, want %+v", req, want)
	}
	f.completeRefund(t, order, 2500)

	// A cancel after the refund, and the refund request again: nothing.
	f.cancel(t, order)
	again := f.outboxEvent(t, order, events.PaymentRefundRequested)
	again.EventID = "00000000-0000-4000-8000-000000000001"
	if err := f.refunds.Process(f.ctx, again); err != nil {
		t.Fatal(err)
	}
	if n := f.refundCalls.Load(); n != 1 {
		t.Errorf("PSP refund calls = %d, want 1", n)
	}
	if n := len(f.pspRefunds(t, order)); n != 1 {
		t.Errorf("PSP refunds = %d, want 1", n)
	}
}

// Nothing to compensate: a declined payment.
func TestCancelAfterDeclineDoesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	f.charged(t, order, "decline-1", 1500)
	f.cancel(t, order)
	if p := f.payment(t, order); p.Status != payment.Failed || p.CancelRequested {
		t.Errorf("payment = %+v, want failed, untouched", p)
	}
	if got := fmt.Sprint(f.outboxTypes(t, order)); got != "[1 payment.charge-requested 2 payment.failed]" {
		t.Errorf("outbox = %s", got)
	}
}

// The PSP refunds, but its answer is lost: the status query with the same
// key finds the refund; exactly one refund.
func TestRefundLostResponseIsResolvedByStatusQuery(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	f.charged(t, order, "c-1", 1500)
	f.cancel(t, order)
	f.setSwitch(t, psp.Switch{Mode: psp.ModeLoseResponse, Count: 1})
	f.completeRefund(t, order, 1500)
	if c, s := f.refundCalls.Load(), f.refundStatusCalls.Load(); c != 1 || s != 1 {
		t.Errorf("PSP calls: %d refunds, %d refund status queries; want 1 and 1", c, s)
	}
}

// Cancel and inventory.reserved for the same order race on two
// connections, twenty times: whichever commits first, the order ends
// consistent (a marker, or a payment withdrawn before its charge was
// sent), and nothing is ever charged.
func TestCancelRacingReservedNeverCharges(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	const n = 20
	errs := make([]error, 2*n)
	// Two goroutines per order: the even one reserves, the odd one cancels.
	testutil.Together(2*n, func(i int) {
		id := uint64(100 + i/2)
		if i%2 == 0 {
			errs[i] = f.saga.Process(f.ctx, paymenttest.Reserved(id, "c-1", 1500))
			return
		}
		errs[i] = f.saga.Process(f.ctx, paymenttest.Cancelled(id, "raced"))
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	markers, withdrawn := 0, 0
	for i := range n {
		id := uint64(100 + i)
		p := f.payment(t, id)
		reqs := f.outboxEvents(t, id, events.PaymentChargeRequested)
		switch {
		case p.IsMarker() && len(reqs) == 0:
			markers++
		case p.Status == payment.Withdrawn && p.CancelRequested && len(reqs) == 1:
			withdrawn++
			if err := f.charges.Process(f.ctx, reqs[0]); err != nil {
				t.Fatalf("order %d: charge request: %v", id, err)
			}
		default:
			t.Errorf("order %d: payment %+v with %d charge requests: inconsistent", id, p, len(reqs))
		}
	}
	t.Logf("%d markers (cancel first), %d withdrawn (reserved first, the charge not sent yet)", markers, withdrawn)
	if c := f.chargeCalls.Load(); c != 0 {
		t.Errorf("PSP charge calls = %d, want 0", c)
	}
}

// completeRefund processes the order's (last) refund request through the
// refund consumer and checks the end of the compensation: refund
// succeeded, payment refunded, payment.refunded with the amount, and at the
// PSP one charge and one refund of the full amount.
func (f *fixture) completeRefund(t *testing.T, orderID uint64, amount int64) {
	t.Helper()
	reqs := f.outboxEvents(t, orderID, events.PaymentRefundRequested)
	if len(reqs) == 0 {
		t.Fatal("no refund request in the outbox")
	}
	before := f.payment(t, orderID)
	succeeded := f.metric(t, "payment_refunds_total", "result", "succeeded")
	if err := f.refunds.Process(f.ctx, reqs[len(reqs)-1]); err != nil {
		t.Fatalf("process refund request: %v", err)
	}
	charges, refunds := f.pspCharges(t, orderID), f.pspRefunds(t, orderID)
	if len(charges) != 1 || len(refunds) != 1 || refunds[0].AmountCents != amount || charges[0].AmountCents != amount ||
		refunds[0].ChargeID != charges[0].ChargeID || refunds[0].IdempotencyKey != payment.RefundKey(orderID) {
		t.Fatalf("PSP: charges %+v, refunds %+v; want one charge and one refund of %d", charges, refunds, amount)
	}
	r := f.refund(t, orderID)
	if r.Status != payment.RefundSucceeded || r.PSPRefundID != refunds[0].RefundID {
		t.Errorf("refund = %+v, want succeeded with %s", r, refunds[0].RefundID)
	}
	p := f.payment(t, orderID)
	if p.Status != payment.Refunded || p.Version != before.Version+1 {
		t.Errorf("payment = %+v, want refunded, version %d", p, before.Version+1)
	}
	ev := f.outboxEvent(t, orderID, events.PaymentRefunded)
	if ev.AggregateVersion != p.Version {
		t.Errorf("payment.refunded version %d, want %d", ev.AggregateVersion, p.Version)
	}
	got := decode[events.PaymentRefundedV1](t, ev.Payload)
	if want := (events.PaymentRefundedV1{OrderID: orderID, AmountCents: amount, RefundID: refunds[0].RefundID}); got != want {
		t.Errorf("payment.refunded = %+v, want %+v", got, want)
	}
	if v := f.metric(t, "payment_refunds_total", "result", "succeeded"); v != succeeded+1 {
		t.Errorf("payment_refunds_total{succeeded} = %v, want %v", v, succeeded+1)
	}
}

// The cancel arrives while the charge request waits in the queue, before
// the charge is sent to the PSP: the payment closes at once, withdrawn
// (terminal: nothing charged, and nothing will be), without waiting for
// PAYMENT_DEADLINE (an hour here). The charge request that comes later
// calls the PSP for nothing, not even a status query; the sweep has
// nothing to look at.
func TestCancelBeforeTheChargeIsSentClosesThePaymentAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	cmd := f.reserve(t, order, "c-1", 1500)
	f.cancel(t, order)

	p := f.payment(t, order)
	if p.Status != payment.Withdrawn || !p.Status.Terminal() || !p.CancelRequested ||
		!strings.Contains(p.CancelReason, "customer asked") {
		t.Fatalf("payment after the cancel = %+v, want withdrawn (terminal) with the cancel's reason", p)
	}
	if err := f.charges.Process(f.ctx, cmd); err != nil {
		t.Fatal(err)
	}
	if c, s := f.chargeCalls.Load(), f.statusCalls.Load(); c != 0 || s != 0 {
		t.Errorf("PSP calls after the withdrawal: %d charges, %d status queries; want none", c, s)
	}
	if rep := f.sweep(t); rep.Charges.Claimed != 0 {
		t.Errorf("sweep = %+v, want nothing claimed (a withdrawn payment is closed)", rep.Charges)
	}
	if got := fmt.Sprint(f.outboxTypes(t, order)); got != "[1 payment.charge-requested]" {
		t.Errorf("outbox = %s, want the charge request only (no result event: the order is cancelled already)", got)
	}
	if got := f.payment(t, order); got.Status != payment.Withdrawn {
		t.Errorf("payment at the end = %s, want withdrawn", got.Status)
	}
}
