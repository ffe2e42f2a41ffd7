package paymentapp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/compose/admin"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentapp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymenthttp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp"
)

// The PSP charged and lost its answer, and the consumer failed before it
// recorded the outcome (its message then went to dead letters: nothing
// retries it). The sweep asks the PSP with the same key, finds the charge
// and records it. No second charge call.
func TestSweepResolvesChargeTheConsumerDidNotRecord(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	cmd := f.reserve(t, order, "c-1", 1500)
	f.setSwitch(t, psp.Switch{Mode: psp.ModeLoseResponse, Count: 1})
	f.failAfterPSPCall(t, cmd)
	if p := f.payment(t, order); p.Status != payment.Pending {
		t.Fatalf("payment = %s, want pending", p.Status)
	}

	rep := f.sweep(t)
	if rep.Charges.Claimed != 1 || rep.Charges.Resolved != 1 {
		t.Fatalf("sweep = %+v, want one payment resolved", rep.Charges)
	}
	charges := f.pspCharges(t, order)
	if len(charges) != 1 || f.chargeCalls.Load() != 1 {
		t.Fatalf("PSP charges = %d, charge calls = %d; want 1 and 1 (the sweep only queries)", len(charges), f.chargeCalls.Load())
	}
	p := f.payment(t, order)
	if p.Status != payment.Succeeded || p.PSPChargeID != charges[0].ChargeID || p.Version != 2 {
		t.Errorf("payment = %+v, want succeeded with %s, version 2", p, charges[0].ChargeID)
	}
	ev := decode[events.PaymentSucceededV1](t, f.outboxEvent(t, order, events.PaymentSucceeded).Payload)
	if ev.ChargeID != charges[0].ChargeID || ev.AmountCents != 1500 {
		t.Errorf("payment.succeeded = %+v", ev)
	}
	if rep := f.sweep(t); rep.Charges.Claimed != 0 {
		t.Errorf("second sweep claimed %d, want 0 (decided)", rep.Charges.Claimed)
	}
}

// The charge request never reached the PSP and its message is gone (dead
// letter). Before the deadline the sweep requests the charge again: a new
// event id, the same idempotency key, the payment's next version. Charged
// once.
func TestSweepRerequestsChargeThePSPNeverReceived(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	first := f.reserve(t, order, "c-1", 1500) // never consumed

	rep := f.sweep(t)
	if rep.Charges.Rerequested != 1 {
		t.Fatalf("sweep = %+v, want one re-request", rep.Charges)
	}
	reqs := f.outboxEvents(t, order, events.PaymentChargeRequested)
	if len(reqs) != 2 || reqs[1].EventID == first.EventID || reqs[1].AggregateVersion != 2 {
		t.Fatalf("charge requests = %+v, want the first and a new one at version 2", reqs)
	}
	if a, b := decode[events.PaymentChargeRequestedV1](t, reqs[0].Payload), decode[events.PaymentChargeRequestedV1](t, reqs[1].Payload); a != b {
		t.Errorf("re-request %+v differs from the first %+v (same key, same facts)", b, a)
	}
	if err := f.charges.Process(f.ctx, reqs[1]); err != nil {
		t.Fatal(err)
	}
	// The first request turns up after all (redriven): nothing more.
	if err := f.charges.Process(f.ctx, first); err != nil {
		t.Fatal(err)
	}
	if p := f.payment(t, order); p.Status != payment.Succeeded || p.Version != 3 {
		t.Errorf("payment = %+v, want succeeded, version 3", p)
	}
	if n := len(f.pspCharges(t, order)); n != 1 || f.chargeCalls.Load() != 1 {
		t.Errorf("PSP charges = %d, calls = %d; want 1 and 1", n, f.chargeCalls.Load())
	}
}

// Unknown outcome at the deadline: the PSP fails before charging or
// answers 5xx, the status query finds nothing, the consumer's attempts are
// noted. Past PAYMENT_DEADLINE the sweep parks the payment as
// needs_attention with the evidence: not failed, not succeeded, no result
// event. The gauge shows it. An operator's retry puts it back with a new
// deadline and a new request (same key); with the PSP healthy it is
// charged once.
func TestUnknownChargeOutcomePastDeadlineIsParked(t *testing.T) {
	t.Parallel()
	for _, mode := range []psp.Mode{psp.ModeFailBeforeCharge, psp.ModeError5xx} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			f := newFixtureAdjusted(t, func(c *paymentapp.Config) { c.ChargeDeadline = time.Microsecond })
			cmd := f.reserve(t, order, "c-1", 1500)
			f.setSwitch(t, psp.Switch{Mode: mode})
			if err := f.charges.Process(f.ctx, cmd); !errors.Is(err, paymentapp.ErrOutcomeUnresolved) {
				t.Fatalf("consumer: %v, want ErrOutcomeUnresolved", err)
			}

			rep := f.sweep(t)
			if rep.Charges.Parked != 1 {
				t.Fatalf("sweep = %+v, want one parked", rep.Charges)
			}
			p := f.payment(t, order)
			if p.Status != payment.NeedsAttention || p.PSPChargeID != "" || p.FailureReason != "" {
				t.Fatalf("payment = %+v, want needs_attention, neither failed nor succeeded", p)
			}
			if p.Attempts != 1 || !strings.Contains(p.LastError, "charge call") ||
				!strings.Contains(p.ParkedReason, "no charge with key charge-42 at the PSP at the deadline") ||
				!strings.Contains(p.ParkedReason, "1 unresolved attempts") {
				t.Errorf("evidence: attempts %d, last error %q, parked reason %q", p.Attempts, p.LastError, p.ParkedReason)
			}
			if got := fmt.Sprint(f.outboxTypes(t, order)); got != "[1 payment.charge-requested]" {
				t.Errorf("outbox = %s, want no result event", got)
			}
			if v := f.metric(t, "payment_needs_attention", "kind", "charge"); v != 1 {
				t.Errorf("payment_needs_attention{charge} = %v, want 1", v)
			}
			// Parked means frozen: the old request, redelivered, does not
			// reach the PSP, and the sweep leaves it alone.
			if err := f.charges.Process(f.ctx, cmd); err != nil {
				t.Fatal(err)
			}
			if rep := f.sweep(t); rep.Charges.Claimed != 0 {
				t.Errorf("sweep claimed %d, want 0 (parked)", rep.Charges.Claimed)
			}
			calls := f.chargeCalls.Load()

			f.setSwitch(t, psp.Switch{Mode: psp.ModeNormal})
			res, err := f.app.Retry(f.ctx, order)
			if err != nil || res.Kind != "charge" || res.Status != "pending" || res.EventID == "" {
				t.Fatalf("Retry = %+v, %v; want the charge back to pending with a new request", res, err)
			}
			reqs := f.outboxEvents(t, order, events.PaymentChargeRequested)
			if len(reqs) != 2 || reqs[1].EventID != res.EventID {
				t.Fatalf("charge requests = %d, want 2", len(reqs))
			}
			if err := f.charges.Process(f.ctx, reqs[1]); err != nil {
				t.Fatal(err)
			}
			if p := f.payment(t, order); p.Status != payment.Succeeded {
				t.Errorf("payment after retry = %s, want succeeded", p.Status)
			}
			if n := len(f.pspCharges(t, order)); n != 1 || f.chargeCalls.Load() != calls+1 {
				t.Errorf("PSP charges = %d, want 1", n)
			}
			if v := f.metric(t, "payment_needs_attention", "kind", "charge"); v != 0 {
				t.Errorf("payment_needs_attention{charge} = %v, want 0", v)
			}
		})
	}
}

// The compensation keeps failing: the PSP answers 5xx to every refund.
// Each failed attempt is counted (payment_compensation_failures_total) and
// noted on the refund; past REFUND_DEADLINE the sweep parks it as
// needs_attention with the evidence. The admin endpoint lists it; its
// retry endpoint puts it back with a new deadline and a new request; with
// the PSP normal again it completes, refunded once.
func TestRefundFailingPastDeadlineIsParkedThenRetried(t *testing.T) {
	t.Parallel()
	f := newFixtureAdjusted(t, func(c *paymentapp.Config) { c.RefundDeadline = time.Microsecond })
	f.charged(t, order, "c-1", 1500)
	f.cancel(t, order)
	f.setSwitch(t, psp.Switch{Mode: psp.ModeError5xx})
	req := f.outboxEvent(t, order, events.PaymentRefundRequested)
	if err := f.refunds.Process(f.ctx, req); !errors.Is(err, paymentapp.ErrRefundUnresolved) {
		t.Fatalf("refund consumer: %v, want ErrRefundUnresolved", err)
	}
	if v := f.metric(t, "payment_compensation_failures_total"); v != 1 {
		t.Errorf("payment_compensation_failures_total = %v, want 1", v)
	}
	r := f.refund(t, order)
	if r.Status != payment.RefundRequested || r.Attempts != 1 || !strings.Contains(r.LastError, "502") {
		t.Errorf("refund = %+v, want requested with 1 attempt and the 502 as evidence", r)
	}

	rep := f.sweep(t)
	if rep.Refunds.Parked != 1 {
		t.Fatalf("sweep = %+v, want the refund parked", rep.Refunds)
	}
	r = f.refund(t, order)
	if r.Status != payment.RefundNeedsAttention || r.Attempts != 1 ||
		!strings.Contains(r.ParkedReason, "no refund with key refund-42 at the PSP at the deadline") {
		t.Errorf("refund = %+v, want needs_attention with the evidence", r)
	}
	if p := f.payment(t, order); p.Status != payment.Succeeded {
		t.Errorf("payment = %s, want still succeeded (the money is still owed)", p.Status)
	}
	if v := f.metric(t, "payment_needs_attention", "kind", "refund"); v != 1 {
		t.Errorf("payment_needs_attention{refund} = %v, want 1", v)
	}
	if v := f.metric(t, "payment_refunds_total", "result", "needs_attention"); v != 1 {
		t.Errorf("payment_refunds_total{needs_attention} = %v, want 1", v)
	}

	ts := adminServer(t, f)
	checkParkedRefundListed(t, ts)

	status, body := adminCall(t, ts, http.MethodPost, "/admin/needs-attention/42/retry", "secret")
	if status != http.StatusOK || !strings.Contains(body, `"kind": "refund"`) || !strings.Contains(body, `"status": "requested"`) {
		t.Fatalf("retry = %d %s, want the refund requested again", status, body)
	}
	after := f.refund(t, order)
	if after.Status != payment.RefundRequested || !after.DeadlineAt.After(r.DeadlineAt) || after.Attempts != 1 {
		t.Errorf("refund after retry = %+v, want requested, a new deadline, the evidence kept", after)
	}
	if status, _ := adminCall(t, ts, http.MethodPost, "/admin/needs-attention/42/retry", "secret"); status != http.StatusConflict {
		t.Errorf("retry of a refund no longer parked: %d, want 409", status)
	}
	if status, _ := adminCall(t, ts, http.MethodPost, "/admin/needs-attention/77/retry", "secret"); status != http.StatusNotFound {
		t.Errorf("retry of an unknown order: %d, want 404", status)
	}

	f.setSwitch(t, psp.Switch{Mode: psp.ModeNormal})
	if n := len(f.outboxEvents(t, order, events.PaymentRefundRequested)); n != 2 {
		t.Fatalf("refund requests = %d, want 2 (the retry wrote a new one)", n)
	}
	f.completeRefund(t, order, 1500)
	if v := f.metric(t, "payment_needs_attention", "kind", "refund"); v != 0 {
		t.Errorf("payment_needs_attention{refund} = %v, want 0", v)
	}
	if _, body := adminCall(t, ts, http.MethodGet, "/admin/needs-attention", "secret"); !strings.Contains(body, `"refunds": []`) {
		t.Errorf("needs-attention after the refund = %s, want empty", body)
	}
}

// checkParkedRefundListed checks that the admin endpoint lists order 42's
// parked refund, with its evidence, and only with the token.
func checkParkedRefundListed(t *testing.T, ts *httptest.Server) {
	t.Helper()
	status, body := adminCall(t, ts, http.MethodGet, "/admin/needs-attention", "secret")
	var list struct {
		Charges []map[string]any `json:"charges"`
		Refunds []map[string]any `json:"refunds"`
	}
	if err := json.Unmarshal([]byte(body), &list); status != http.StatusOK || err != nil {
		t.Fatalf("GET /admin/needs-attention = %d %s", status, body)
	}
	if len(list.Charges) != 0 || len(list.Refunds) != 1 {
		t.Fatalf("needs-attention = %s, want one refund", body)
	}
	got := list.Refunds[0]
	if got["order_id"] != "42" || got["status"] != "needs_attention" || got["attempts"] != 1.0 ||
		got["amount_cents"] != 1500.0 || !strings.Contains(fmt.Sprint(got["last_error"]), "502") ||
		!strings.Contains(fmt.Sprint(got["parked_reason"]), "deadline") || got["parked_at"] == nil {
		t.Errorf("listed refund = %v, want order 42 with its evidence", got)
	}
	if status, _ := adminCall(t, ts, http.MethodGet, "/admin/needs-attention", ""); status != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", status)
	}
}

// A refund whose answer the sweep finds at the PSP (the consumer failed
// after the PSP refunded) is recorded by the sweep; one refund, and a
// refund the PSP has no record of is requested again before its deadline.
func TestSweepResolvesAndRerequestsRefunds(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	for _, id := range []uint64{order, order + 1} {
		f.charged(t, id, "c-1", 1500)
		f.cancel(t, id)
	}
	f.failpoint.Error(paymentapp.FailpointAfterPSPRefund, 1)
	if err := f.refunds.Process(f.ctx, f.outboxEvent(t, order, events.PaymentRefundRequested)); err == nil {
		t.Fatal("refund consumer: want the injected error")
	}
	// order+1's refund request is never consumed.

	rep := f.sweep(t)
	if rep.Refunds.Claimed != 2 || rep.Refunds.Resolved != 1 || rep.Refunds.Rerequested != 1 {
		t.Fatalf("sweep = %+v, want one refund resolved and one requested again", rep.Refunds)
	}
	if p := f.payment(t, order); p.Status != payment.Refunded {
		t.Errorf("payment %d = %s, want refunded", order, p.Status)
	}
	f.outboxEvent(t, order, events.PaymentRefunded)
	if n := f.refundCalls.Load(); n != 1 {
		t.Errorf("refund calls = %d, want 1", n)
	}
	f.completeRefund(t, order+1, 1500)
}

// Two sweeps (two instances, each with its own connection pool) race over
// the same due payments, batch by batch, until nothing is due: every
// payment is re-requested exactly once.
func TestTwoSweepsRerequestEachPaymentOnce(t *testing.T) {
	t.Parallel()
	f := newFixtureAdjusted(t, func(c *paymentapp.Config) { c.SweepBatch = 4 })
	const n = 30
	for i := range n {
		f.reserve(t, uint64(100+i), "c-1", 1500)
	}
	db2, err := sqldb.Open(context.Background(), sqldb.Config{DSN: f.db.DSN})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db2.Close() })
	other := paymentapp.New(db2, f.pspView, quiet, nil, f.cfg)

	apps := []*paymentapp.App{f.app, other}
	total, byInstance := 0, [2]int{}
	for round := 0; ; round++ {
		var reps [2]paymentapp.SweepReport
		var errs [2]error
		testutil.Together(len(apps), func(i int) { reps[i], errs[i] = apps[i].Sweep(context.Background()) })
		if err := errors.Join(errs[:]...); err != nil {
			t.Fatal(err)
		}
		claimed := reps[0].Charges.Claimed + reps[1].Charges.Claimed
		byInstance[0] += reps[0].Charges.Claimed
		byInstance[1] += reps[1].Charges.Claimed
		total += reps[0].Charges.Rerequested + reps[1].Charges.Rerequested
		if claimed == 0 {
			break
		}
		if round > n {
			t.Fatal("sweeps do not converge")
		}
	}
	t.Logf("claims by instance: %v", byInstance)
	if total != n || byInstance[0]+byInstance[1] != n {
		t.Errorf("re-requests = %d, claims = %v; want %d, one claim per payment", total, byInstance, n)
	}
	for i := range n {
		id := uint64(100 + i)
		if reqs := f.outboxEvents(t, id, events.PaymentChargeRequested); len(reqs) != 2 {
			t.Errorf("order %d: %d charge requests, want 2 (the first and one re-request)", id, len(reqs))
		}
	}
	if rounds := f.count(t, `SELECT COUNT(*) FROM payments WHERE sweep_rounds <> 1`); rounds != 0 {
		t.Errorf("%d payments were claimed other than once", rounds)
	}
	if f.chargeCalls.Load() != 0 {
		t.Errorf("charge calls = %d, want 0 (the sweep never charges)", f.chargeCalls.Load())
	}
}

func adminServer(t *testing.T, f *fixture) *httptest.Server {
	t.Helper()
	r := chi.NewRouter()
	r.Route("/admin", func(ar chi.Router) {
		ar.Use(admin.RequireToken("secret", false))
		paymenthttp.AdminRoutes(f.app, quiet)(ar)
	})
	ts := httptest.NewServer(r)
	t.Cleanup(ts.Close)
	return ts
}

func adminCall(t *testing.T, ts *httptest.Server, method, path, token string) (int, string) {
	t.Helper()
	a := testutil.Call(t, method, ts.URL+path, "", "Authorization", testutil.Bearer(token))
	return a.Status, a.Body
}

// The PSP refuses the refund (4xx: here, our key was used before for
// another amount). No retry can change that answer: the refund is parked
// at once, with the PSP's answer as evidence, and counted.
func TestRefundRefusedByPSPIsParkedAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	f.charged(t, order, "c-1", 1500)
	charge := f.pspCharges(t, order)[0]
	if _, err := f.pspView.Refund(context.Background(), psp.RefundRequest{IdempotencyKey: "refund-42",
		ChargeID: charge.ChargeID, AmountCents: 100}); err != nil {
		t.Fatal(err)
	}
	f.cancel(t, order)
	if err := f.refunds.Process(f.ctx, f.outboxEvent(t, order, events.PaymentRefundRequested)); err != nil {
		t.Fatalf("refund consumer: %v, want the refusal recorded (parked), not an error", err)
	}
	r := f.refund(t, order)
	if r.Status != payment.RefundNeedsAttention || !strings.Contains(r.ParkedReason, "PSP refused the refund") ||
		!strings.Contains(r.ParkedReason, "409") {
		t.Errorf("refund = %+v, want needs_attention with the PSP's 409", r)
	}
	if v := f.metric(t, "payment_compensation_failures_total"); v != 1 {
		t.Errorf("payment_compensation_failures_total = %v, want 1", v)
	}
	if p := f.payment(t, order); p.Status != payment.Succeeded {
		t.Errorf("payment = %s, want succeeded (not refunded)", p.Status)
	}
}

// The PSP cannot even be asked at the deadline (its status endpoint is
// unreachable from this instance): the outcome is unknown, so the payment
// of a cancelled order is parked, not closed. An operator's retry puts it
// back without a new charge (the order is cancelled); the next sweep, with
// the PSP reachable and still no charge, closes it: nothing charged.
func TestStatusQueryFailingAtDeadlineParksThenRetryCloses(t *testing.T) {
	t.Parallel()
	f := newFixtureAdjusted(t, func(c *paymentapp.Config) { c.ChargeDeadline = time.Microsecond })
	f.reserve(t, order, "c-1", 1500)
	f.markSent(t, order)
	f.cancel(t, order)

	cut := paymentapp.New(f.db.DB, psp.NewClient("http://127.0.0.1:1/psp", &http.Client{Timeout: time.Second}), quiet, nil, f.cfg)
	rep, err := cut.Sweep(f.ctx)
	if err != nil || rep.Charges.Parked != 1 {
		t.Fatalf("sweep without the PSP = %+v, %v; want one parked", rep.Charges, err)
	}
	p := f.payment(t, order)
	if p.Status != payment.NeedsAttention || p.Attempts != 1 || !strings.Contains(p.ParkedReason, "status query with key charge-42 failed") {
		t.Fatalf("payment = %+v, want needs_attention with the failed query as evidence", p)
	}

	res, err := f.app.Retry(f.ctx, order)
	if err != nil || res.Kind != "charge" || res.EventID != "" {
		t.Fatalf("Retry = %+v, %v; want the charge back to pending without a new request", res, err)
	}
	if _, err := f.app.Retry(f.ctx, order); !errors.Is(err, payment.ErrNotParked) {
		t.Errorf("second Retry: %v, want ErrNotParked", err)
	}
	if rep := f.sweep(t); rep.Charges.Voided != 1 {
		t.Fatalf("sweep = %+v, want the payment closed", rep.Charges)
	}
	if p := f.payment(t, order); p.Status != payment.CancelledBeforeCharge {
		t.Errorf("payment = %s, want cancelled_before_charge", p.Status)
	}
	if n := len(f.outboxEvents(t, order, events.PaymentChargeRequested)); n != 1 || f.chargeCalls.Load() != 0 {
		t.Errorf("charge requests = %d, charge calls = %d; want 1 and 0", n, f.chargeCalls.Load())
	}
}
