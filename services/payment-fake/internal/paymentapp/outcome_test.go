package paymentapp_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentapp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp"
)

// What the order's deadline sweep is told about a charge: a decided
// payment answers from its record; an open one asks the PSP by the key
// (never charging) and records nothing; a charge never sent is
// not_charged, one sent without a PSP record is unknown (it may still
// land), and so is a PSP that cannot be asked.
func TestOutcomeAnswersFromTheRecordOrThePSP(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	if _, err := f.app.Outcome(f.ctx, 404); !errors.Is(err, payment.ErrNotFound) {
		t.Fatalf("no payment: %v, want ErrNotFound", err)
	}
	check := func(what string, id uint64, app *paymentapp.App, outcome, source string) {
		t.Helper()
		got, err := app.Outcome(f.ctx, id)
		if err != nil || got.Outcome != outcome || got.Source != source {
			t.Errorf("%s: %+v %v, want %s from %s", what, got, err, outcome, source)
		}
	}
	// Open, never sent.
	f.reserve(t, 1, "c-1", 1500)
	check("pending, never sent", 1, f.app, paymentapp.OutcomeNotCharged, paymentapp.SourcePSP)
	// Open, sent, nothing at the PSP (the send was lost before charging).
	f.reserve(t, 2, "c-1", 1500)
	f.markSent(t, 2)
	check("pending, sent, no PSP record", 2, f.app, paymentapp.OutcomeUnknown, paymentapp.SourcePSP)
	down := paymentapp.New(f.db.DB, psp.NewClient("http://127.0.0.1:1/psp", &http.Client{Timeout: time.Second}), quiet, nil, longDeadlines)
	check("pending, the PSP down", 2, down, paymentapp.OutcomeUnknown, paymentapp.SourcePSP)
	// Open, charged at the PSP, not recorded.
	cmd := f.reserve(t, 3, "c-1", 1500)
	f.failAfterPSPCall(t, cmd)
	check("pending, charged at the PSP", 3, f.app, paymentapp.OutcomeSucceeded, paymentapp.SourcePSP)
	if p := f.payment(t, 3); p.Status != payment.Pending {
		t.Errorf("payment after the question = %s, want pending (Outcome records nothing)", p.Status)
	}
	// Decided: the record answers.
	if err := f.charges.Process(f.ctx, cmd); err != nil {
		t.Fatal(err)
	}
	check("succeeded", 3, f.app, paymentapp.OutcomeSucceeded, paymentapp.SourceRecord)
	f.charged(t, 4, "decline-1", 1500)
	check("declined", 4, f.app, paymentapp.OutcomeDeclined, paymentapp.SourceRecord)
	f.reserve(t, 5, "c-1", 1500)
	f.cancel(t, 5)
	check("withdrawn", 5, f.app, paymentapp.OutcomeNotCharged, paymentapp.SourceRecord)
	// Charge calls: order 3 twice (the retry, same key), order 4 once; the
	// questions made none.
	if c := f.chargeCalls.Load(); c != 3 || len(f.pspCharges(t, 1))+len(f.pspCharges(t, 2))+len(f.pspCharges(t, 5)) != 0 {
		t.Errorf("PSP charge calls = %d, want 3, and no charge for the orders only asked about", c)
	}
}
