package paymentapp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentapp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentbindings"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymenttest"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp"
)

const order = 42

func TestInventoryReservedCreatesPendingPaymentAndChargeRequest(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)

	cmd := f.reserve(t, order, "c-1", 1500)

	p := f.payment(t, order)
	want := payment.Payment{OrderID: order, CustomerID: "c-1", AmountCents: 1500, Currency: "EUR",
		Status: payment.Pending, IdempotencyKey: "charge-42", Version: 1,
		RequestEventID: cmd.EventID} // a later request corrects this one
	// The deadline of the charge's outcome is set with the payment
	// (ChargeDeadline from now, database time).
	if d := p.DeadlineAt.Sub(p.CreatedAt); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("deadline_at - created_at = %s, want the configured hour", d)
	}
	p.CreatedAt, p.UpdatedAt, p.DeadlineAt = time.Time{}, time.Time{}, time.Time{}
	if p != want {
		t.Errorf("payment = %+v\nwant      %+v", p, want)
	}
	if rows := f.outbox(t); len(rows) != 1 {
		t.Fatalf("outbox has %d rows, want 1 (the charge request)", len(rows))
	}
	if cmd.AggregateID != order || cmd.AggregateVersion != 1 || cmd.SchemaVersion != 1 {
		t.Errorf("charge request envelope = %+v, want order 42, version 1, schema 1", cmd)
	}
	got := decode[events.PaymentChargeRequestedV1](t, cmd.Payload)
	wantCmd := events.PaymentChargeRequestedV1{OrderID: order, CustomerID: "c-1", AmountCents: 1500,
		Currency: "EUR", IdempotencyKey: "charge-42"}
	if got != wantCmd {
		t.Errorf("charge request = %+v, want %+v", got, wantCmd)
	}
	// Deciding to charge is local: the PSP has not been called.
	if n := f.chargeCalls.Load(); n != 0 {
		t.Errorf("PSP received %d charge calls, want 0", n)
	}
}

func TestInventoryReservedTwiceMakesOnePayment(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	e := paymenttest.Reserved(order, "c-1", 1500)
	if err := f.saga.Process(f.ctx, e); err != nil {
		t.Fatal(err)
	}
	if err := f.saga.Process(f.ctx, e); !errors.Is(err, inbox.ErrAlreadyProcessed) {
		t.Fatalf("same event again: err = %v, want ErrAlreadyProcessed", err)
	}
	// The same fact under another event id (re-published, redriven as new)
	// and even a disagreeing amount: the order's payment exists, nothing
	// changes, and the event still counts as processed.
	if err := f.saga.Process(f.ctx, paymenttest.Reserved(order, "c-1", 1500)); err != nil {
		t.Fatalf("same order, new event id: %v", err)
	}
	if err := f.saga.Process(f.ctx, paymenttest.Reserved(order, "c-1", 9900)); err != nil {
		t.Fatalf("same order, other amount: %v", err)
	}
	if p := f.payment(t, order); p.AmountCents != 1500 || p.Status != payment.Pending || p.Version != 1 {
		t.Errorf("payment = %+v, want the first one unchanged", p)
	}
	if n := f.count(t, `SELECT COUNT(*) FROM payments`); n != 1 {
		t.Errorf("payments rows = %d, want 1", n)
	}
	if rows := f.outbox(t); len(rows) != 1 {
		t.Errorf("outbox has %d rows, want 1 charge request", len(rows))
	}
	if n := f.count(t, `SELECT COUNT(*) FROM consumer_inbox WHERE consumer_name = 'payment'`); n != 3 {
		t.Errorf("inbox rows = %d, want 3 (one per distinct event)", n)
	}
}

func TestInvalidReservationIsDeadLettered(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	e := paymenttest.Reserved(order, "c-1", 1500)
	e.Payload = []byte(`{"order_id":"42","customer_id":"c-1","items":[{"sku":"A","quantity":1,"unit_price_cents":1}],"amount_cents":1,"currency":"euro"}`)
	if err := f.saga.Process(f.ctx, e); !errors.Is(err, events.ErrInvalid) {
		t.Fatalf("currency euro: err = %v, want events.ErrInvalid", err)
	}
	if n := f.count(t, `SELECT COUNT(*) FROM payments`); n != 0 {
		t.Errorf("payments rows = %d, want 0", n)
	}
}

func TestChargeSucceeds(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	cmd := f.reserve(t, order, "c-1", 1500)

	if err := f.charges.Process(f.ctx, cmd); err != nil {
		t.Fatalf("process charge request: %v", err)
	}

	charges := f.pspCharges(t, order)
	if len(charges) != 1 || charges[0].Status != psp.StatusSucceeded || charges[0].IdempotencyKey != "charge-42" ||
		charges[0].AmountCents != 1500 || charges[0].Currency != "EUR" || charges[0].CustomerID != "c-1" {
		t.Fatalf("PSP charges = %+v, want one succeeded charge of 1500 EUR with key charge-42", charges)
	}
	ch := charges[0]
	p := f.payment(t, order)
	if p.Status != payment.Succeeded || p.PSPChargeID != ch.ChargeID || p.FailureReason != "" || p.Version != 2 {
		t.Errorf("payment = %+v, want succeeded with charge %s, version 2", p, ch.ChargeID)
	}
	ev := f.outboxEvent(t, order, events.PaymentSucceeded)
	if ev.AggregateVersion != 2 {
		t.Errorf("payment.succeeded version = %d, want 2", ev.AggregateVersion)
	}
	got := decode[events.PaymentSucceededV1](t, ev.Payload)
	want := events.PaymentSucceededV1{OrderID: order, AmountCents: 1500, Currency: "EUR", ChargeID: ch.ChargeID}
	if got != want {
		t.Errorf("payment.succeeded = %+v, want %+v", got, want)
	}
	if c, s := f.chargeCalls.Load(), f.statusCalls.Load(); c != 1 || s != 0 {
		t.Errorf("PSP calls: %d charges, %d status queries; want 1, 0", c, s)
	}
}

func TestChargeDeclined(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		customer string
		amount   int64
		code     string
	}{
		{"customer declined", "decline-1", 1500, psp.DeclineCardDeclined},
		{"amount over the PSP's limit", "c-1", psp.MaxAmountCents + 1, psp.DeclineAmountLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, 3*time.Second)
			cmd := f.reserve(t, order, tt.customer, tt.amount)

			// A decline is an answer, not an error: processed and acked.
			if err := f.charges.Process(f.ctx, cmd); err != nil {
				t.Fatalf("process charge request: %v", err)
			}
			charges := f.pspCharges(t, order)
			if len(charges) != 1 || charges[0].Status != psp.StatusDeclined || charges[0].DeclineCode != tt.code {
				t.Fatalf("PSP charges = %+v, want one declined (%s)", charges, tt.code)
			}
			p := f.payment(t, order)
			if p.Status != payment.Failed || p.FailureReason != tt.code || p.PSPChargeID != charges[0].ChargeID || p.Version != 2 {
				t.Errorf("payment = %+v, want failed (%s), version 2", p, tt.code)
			}
			ev := f.outboxEvent(t, order, events.PaymentFailed)
			got := decode[events.PaymentFailedV1](t, ev.Payload)
			if ev.AggregateVersion != 2 || got != (events.PaymentFailedV1{OrderID: order, Reason: tt.code}) {
				t.Errorf("payment.failed v%d %+v, want v2 with reason %s", ev.AggregateVersion, got, tt.code)
			}
			if rows := f.outbox(t); len(rows) != 2 {
				t.Errorf("outbox has %d rows, want 2 (charge request, payment.failed)", len(rows))
			}
		})
	}
}

// The PSP charged, but its answer never arrived (connection dropped, or
// the answer came after our timeout). The status query with the same key
// finds the charge: succeeded, exactly one charge, never "declined".
func TestUnknownOutcomeIsResolvedByStatusQuery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		sw   psp.Switch
	}{
		{"lose-response", psp.Switch{Mode: psp.ModeLoseResponse, Count: 1}},
		{"slow, answer after our timeout", psp.Switch{Mode: psp.ModeSlow, DelayMS: 3000, Count: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, time.Second)
			cmd := f.reserve(t, order, "c-1", 1500)
			f.setSwitch(t, tt.sw)

			if err := f.charges.Process(f.ctx, cmd); err != nil {
				t.Fatalf("process charge request: %v", err)
			}
			charges := f.pspCharges(t, order)
			if len(charges) != 1 || charges[0].Status != psp.StatusSucceeded {
				t.Fatalf("PSP charges = %+v, want exactly one succeeded", charges)
			}
			p := f.payment(t, order)
			if p.Status != payment.Succeeded || p.PSPChargeID != charges[0].ChargeID {
				t.Errorf("payment = %+v, want succeeded with charge %s", p, charges[0].ChargeID)
			}
			f.outboxEvent(t, order, events.PaymentSucceeded)
			if c, s := f.chargeCalls.Load(), f.statusCalls.Load(); c != 1 || s != 1 {
				t.Errorf("PSP calls: %d charges, %d status queries; want 1 and 1", c, s)
			}
		})
	}
}

// The PSP never charged (the request was lost on the way, or it answered
// 5xx). The status query finds nothing: that is "not yet", not "declined".
// The attempt fails as transient (a delayed retry, not a dead letter), the
// payment stays pending; the retry, with the PSP healthy again, charges
// once with the same key.
func TestChargeNotMadeIsRetriedWithTheSameKey(t *testing.T) {
	t.Parallel()
	for _, mode := range []psp.Mode{psp.ModeFailBeforeCharge, psp.ModeError5xx} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, 3*time.Second)
			cmd := f.reserve(t, order, "c-1", 1500)
			f.setSwitch(t, psp.Switch{Mode: mode})

			err := f.charges.Process(f.ctx, cmd)
			if !errors.Is(err, paymentapp.ErrOutcomeUnresolved) || errors.Is(err, events.ErrInvalid) {
				t.Fatalf("Process = %v, want ErrOutcomeUnresolved (transient)", err)
			}
			// Through the broker entry point: a delayed retry, not an ack
			// and not a dead letter.
			dec := handle(f.charges, cmd)
			if dec == rabbit.Ack() {
				t.Fatalf("decision = ack, want a delayed retry")
			}
			if n := f.count(t, `SELECT COUNT(*) FROM dead_letters`); n != 0 {
				t.Fatalf("dead letters = %d, want 0", n)
			}
			if p := f.payment(t, order); p.Status != payment.Pending || p.PSPChargeID != "" || p.Version != 1 ||
				p.Attempts != 2 || !strings.Contains(p.LastError, "no charge with this key") {
				t.Errorf("payment = %+v, want pending, untouched but for the evidence of 2 unresolved attempts", p)
			}
			if cs := f.pspCharges(t, order); len(cs) != 0 {
				t.Errorf("PSP charges = %+v, want none", cs)
			}
			if n := f.count(t, `SELECT COUNT(*) FROM consumer_inbox WHERE event_id = ?`, cmd.EventID); n != 0 {
				t.Errorf("inbox rows for the event = %d, want 0 (not processed yet)", n)
			}

			f.setSwitch(t, psp.Switch{Mode: psp.ModeNormal})
			if err := f.charges.Process(f.ctx, cmd); err != nil {
				t.Fatalf("retry with the PSP back to normal: %v", err)
			}
			charges := f.pspCharges(t, order)
			if len(charges) != 1 || charges[0].Status != psp.StatusSucceeded {
				t.Fatalf("PSP charges = %+v, want exactly one succeeded", charges)
			}
			if p := f.payment(t, order); p.Status != payment.Succeeded || p.PSPChargeID != charges[0].ChargeID {
				t.Errorf("payment = %+v, want succeeded", p)
			}
			f.outboxEvent(t, order, events.PaymentSucceeded)
			if c, s := f.chargeCalls.Load(), f.statusCalls.Load(); c != 3 || s != 2 {
				t.Errorf("PSP calls: %d charges, %d status queries; want 3 and 2", c, s)
			}
		})
	}
}

func TestSameChargeRequestTwiceCallsThePSPOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	cmd := f.charged(t, order, "c-1", 1500)
	if err := f.charges.Process(f.ctx, cmd); !errors.Is(err, inbox.ErrAlreadyProcessed) {
		t.Fatalf("second delivery: err = %v, want ErrAlreadyProcessed", err)
	}
	if n := f.chargeCalls.Load(); n != 1 {
		t.Errorf("PSP received %d charge calls, want 1 (the inbox stops the redelivery before the PSP)", n)
	}
	if cs := f.pspCharges(t, order); len(cs) != 1 {
		t.Errorf("PSP charges = %d, want 1", len(cs))
	}
	f.outboxEvent(t, order, events.PaymentSucceeded) // exactly one
}

// A charge request for a payment decided already (another event id: a
// redrive, a re-publish) does not reach the PSP and changes nothing.
func TestDecidedPaymentIsNotChargedAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	cmd := f.charged(t, order, "c-1", 1500)
	before := f.payment(t, order)
	again := cmd
	again.EventID = uuid.NewString()
	if err := f.charges.Process(f.ctx, again); err != nil {
		t.Fatalf("charge request under a new event id: %v", err)
	}
	if n := f.chargeCalls.Load(); n != 1 {
		t.Errorf("PSP received %d charge calls, want 1", n)
	}
	if after := f.payment(t, order); after != before {
		t.Errorf("payment changed:\n got %+v\nwant %+v", after, before)
	}
	f.outboxEvent(t, order, events.PaymentSucceeded) // still exactly one
}

// The windows between the PSP's answer and our commit: an error after the
// PSP call, or after the payment change inside the transaction, rolls the
// whole attempt back (no inbox row, no status change, no result event). The
// retry calls the PSP again and the same key returns the same charge: two
// calls, one charge, one result.
func TestFailureAfterPSPCallDoesNotChargeTwice(t *testing.T) {
	t.Parallel()
	for _, point := range []string{paymentapp.FailpointAfterPSPCall, "inbox.after-effect-before-commit"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, 3*time.Second)
			cmd := f.reserve(t, order, "c-1", 1500)
			f.failpoint.Error(point, 1)

			if err := f.charges.Process(f.ctx, cmd); !errors.Is(err, failpoint.ErrInjected) {
				t.Fatalf("first attempt: err = %v, want the injected fault", err)
			}
			if p := f.payment(t, order); p.Status != payment.Pending || p.Version != 1 || p.PSPChargeID != "" {
				t.Fatalf("payment = %+v after the failed attempt, want pending, untouched", p)
			}
			if rows := f.outbox(t); len(rows) != 1 {
				t.Fatalf("outbox has %d rows after the failed attempt, want 1 (no result event)", len(rows))
			}
			if n := f.count(t, `SELECT COUNT(*) FROM consumer_inbox WHERE event_id = ?`, cmd.EventID); n != 0 {
				t.Fatalf("inbox rows = %d after the failed attempt, want 0", n)
			}
			if cs := f.pspCharges(t, order); len(cs) != 1 {
				t.Fatalf("PSP charges = %d after the first attempt, want 1 (charged, not recorded)", len(cs))
			}

			if err := f.charges.Process(f.ctx, cmd); err != nil {
				t.Fatalf("retry: %v", err)
			}
			charges := f.pspCharges(t, order)
			if len(charges) != 1 {
				t.Fatalf("PSP charges = %d, want 1", len(charges))
			}
			if p := f.payment(t, order); p.Status != payment.Succeeded || p.PSPChargeID != charges[0].ChargeID {
				t.Errorf("payment = %+v, want succeeded with the first charge", p)
			}
			f.outboxEvent(t, order, events.PaymentSucceeded) // exactly one
			if n := f.chargeCalls.Load(); n != 2 {
				t.Errorf("PSP received %d charge calls, want 2 (one charge)", n)
			}
		})
	}
}

// A 4xx from the PSP is a refusal: nothing was charged and the same call
// gets the same answer, so the message goes to dead letters at once.
func TestPSPRefusalIsDeadLettered(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	cmd := f.reserve(t, order, "c-1", 1500)
	// Someone used our key with another amount: the PSP answers 409.
	if _, err := f.pspView.Charge(context.Background(), psp.ChargeRequest{IdempotencyKey: "charge-42",
		OrderRef: "42", CustomerID: "c-1", AmountCents: 999, Currency: "EUR"}); err != nil {
		t.Fatal(err)
	}

	if dec := handle(f.charges, cmd); dec != rabbit.Ack() {
		t.Fatalf("decision = %+v, want ack after recording the dead letter", dec)
	}
	var reason string
	if err := f.db.GetContext(context.Background(), &reason,
		`SELECT reason FROM dead_letters WHERE consumer_name = ? AND event_id = ?`, paymentbindings.PSPConsumer, cmd.EventID); err != nil {
		t.Fatalf("dead letter: %v", err)
	}
	t.Logf("dead letter reason: %s", reason)
	if p := f.payment(t, order); p.Status != payment.Pending {
		t.Errorf("payment = %s, want pending (nothing decided)", p.Status)
	}
	if n := f.chargeCalls.Load(); n != 2 {
		t.Errorf("PSP received %d charge calls, want 2 (the test's and ours)", n)
	}
}

// Eight charge requests for one order (distinct event ids) race: all call
// the PSP before any records, then all record together. One charge, one
// decision, one payment.succeeded.
func TestConcurrentChargeRequestsHaveOneEffect(t *testing.T) {
	t.Parallel()
	// The eight attempts queue on the payment's row (the mark) and on the
	// PSP's unique key (the insert): on a loaded machine the last waits for
	// seven, so the client's time bound is generous (it failed at 5 s in a
	// suite run: an attempt that times out never reaches the window).
	f := newFixture(t, 30*time.Second)
	cmd := f.reserve(t, order, "c-1", 1500)
	const n = 8
	gate := f.failpoint.Pause(paymentapp.FailpointAfterPSPCall, n)

	errs := make([]error, n)
	var wg sync.WaitGroup
	var returned atomic.Int32 // an attempt that returns before the window never reaches it
	for i := range n {
		e := cmd
		e.EventID = uuid.NewString()
		wg.Go(func() { errs[i] = f.charges.Process(f.ctx, e); returned.Add(1) })
	}
	t.Cleanup(gate.Release) // if the wait fails: let the attempts go
	paused := func() int {
		for _, s := range f.failpoint.Armed() {
			if s.Name == paymentapp.FailpointAfterPSPCall {
				return s.Paused
			}
		}
		return 0
	}
	testutil.WaitFor(t, 60*time.Second, fmt.Sprintf("all %d attempts to reach the window", n), func() bool {
		return paused() == n || returned.Load() > 0
	})
	if returned.Load() > 0 {
		gate.Release()
		wg.Wait()
		t.Fatalf("an attempt returned before the window (%d of %d there): %v", paused(), n, errors.Join(errs...))
	}
	gate.Release()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("attempt %d: %v", i, err)
		}
	}
	if c := f.chargeCalls.Load(); c != n {
		t.Errorf("PSP received %d charge calls, want %d (every attempt called before any recorded)", c, n)
	}
	charges := f.pspCharges(t, order)
	if len(charges) != 1 {
		t.Fatalf("PSP charges = %d, want 1", len(charges))
	}
	if p := f.payment(t, order); p.Status != payment.Succeeded || p.Version != 2 || p.PSPChargeID != charges[0].ChargeID {
		t.Errorf("payment = %+v, want succeeded, version 2", p)
	}
	f.outboxEvent(t, order, events.PaymentSucceeded) // exactly one
	if got := f.count(t, `SELECT COUNT(*) FROM consumer_inbox WHERE consumer_name = ?`, paymentbindings.PSPConsumer); got != n {
		t.Errorf("inbox rows = %d, want %d (every event processed, one effect)", got, n)
	}
}
