package paymenthttp_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/endpoints"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/base/web"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentapp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentdb"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymenthttp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp/psptest"
)

var quiet = slog.New(slog.DiscardHandler)

func server(t *testing.T, demoMode bool) (*httptest.Server, *sqldbtest.DB) {
	t.Helper()
	return serverWith(t, demoMode, "", func(h http.Handler) http.Handler { return h })
}

// serverWith is server with PSP_URL starting with firstPSP (an address
// tried before the PSP's own) and admin guarding what wants the admin
// token.
func serverWith(t *testing.T, demoMode bool, firstPSP string, admin func(http.Handler) http.Handler) (*httptest.Server, *sqldbtest.DB) {
	t.Helper()
	db := sqldbtest.New(t, "payment")
	r := chi.NewRouter()
	app := paymentapp.New(db.DB, psp.NewClient("http://127.0.0.1:1/psp", nil), quiet, nil, paymentapp.Config{})
	// The PSP as its process serves it: under /psp, switches guarded by
	// its own demo mode.
	pspURL := psptest.Serve(t, psp.Guard(psp.NewServer(db.DB, quiet).Handler(), psp.Access{Demo: demoMode}, quiet))
	paymenthttp.Routes(r, app, endpoints.Must(firstPSP+pspURL), admin, quiet)
	ts := httptest.NewServer(r)
	t.Cleanup(ts.Close)
	return ts, db
}

func call(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	ct := ""
	if body != "" {
		ct = "application/json"
	}
	a := testutil.Call(t, method, url, body, "Content-Type", ct)
	return a.Status, a.Body
}

func TestGetPayment(t *testing.T) {
	t.Parallel()
	ts, db := server(t, false)
	ctx := context.Background()
	p, err := payment.New(42, "c-1", 1500, "EUR")
	if err != nil {
		t.Fatal(err)
	}
	if err := sqldb.WithTx(ctx, db.DB, func(tx *sqlx.Tx) error { return paymentdb.Insert(ctx, tx, p, time.Minute, time.Minute) }); err != nil {
		t.Fatal(err)
	}

	status, body := call(t, http.MethodGet, ts.URL+"/payments/42", "")
	if status != http.StatusOK {
		t.Fatalf("GET /payments/42 = %d %s, want 200", status, body)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"order_id": "42", "status": "pending", "amount_cents": 1500.0, "currency": "EUR",
		"customer_id": "c-1", "idempotency_key": "charge-42", "psp_charge_id": "", "failure_reason": "",
		"charge_sent": false, "cancel_requested": false, "cancel_reason": "", "attempts": 0.0, "last_error": "", "parked_reason": "",
		"refund": nil}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %#v, want %#v", k, got[k], v)
		}
	}
	for _, k := range []string{"created_at", "updated_at", "deadline_at"} {
		s, _ := got[k].(string)
		if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
			t.Errorf("%s = %#v, want an RFC 3339 time", k, got[k])
		}
	}
	if len(got) != len(want)+3 {
		t.Errorf("body has %d fields, want %d: %s", len(got), len(want)+3, body)
	}

	// Decided: the charge id and the reason show.
	err = sqldb.WithTx(ctx, db.DB, func(tx *sqlx.Tx) error {
		_, err := paymentdb.Decide(ctx, tx, 42, paymentdb.Decision{From: payment.Pending, To: payment.Failed,
			PSPChargeID: "ch_1", FailureReason: "card_declined", Version: 2})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	_, body = call(t, http.MethodGet, ts.URL+"/payments/42", "")
	for _, s := range []string{`"status": "failed"`, `"psp_charge_id": "ch_1"`, `"failure_reason": "card_declined"`} {
		if !strings.Contains(body, s) {
			t.Errorf("body %s lacks %s", body, s)
		}
	}
}

func TestGetPaymentNotFound(t *testing.T) {
	t.Parallel()
	ts, _ := server(t, false)
	for _, path := range []string{"/payments/7", "/payments/0", "/payments/abc", "/payments/-1"} {
		status, body := call(t, http.MethodGet, ts.URL+path, "")
		if status != http.StatusNotFound || !strings.Contains(body, `"error": "payment not found"`) {
			t.Errorf("GET %s = %d %s, want 404 with a JSON error", path, status, body)
		}
	}
}

// /psp on the payment service passes the PSP's reads through, moving on
// to the next address of PSP_URL when one cannot be reached; its writes
// (charges, refunds, the fault switch) are refused (405) and reach nothing.
func TestPSPMountIsReadOnly(t *testing.T) {
	t.Parallel()
	ts, db := serverWith(t, true, "http://127.0.0.1:1/psp,", func(h http.Handler) http.Handler { return h })
	for _, path := range []string{"/psp/charges/nope", "/psp/refunds/nope"} {
		if status, body := call(t, http.MethodGet, ts.URL+path, ""); status != http.StatusNotFound || !strings.Contains(body, "idempotency key") {
			t.Errorf("GET %s = %d %s, want the PSP's 404 (through the second address)", path, status, body)
		}
	}
	if status, body := call(t, http.MethodGet, ts.URL+"/psp/charges?order_ref=1", ""); status != http.StatusOK || !strings.Contains(body, `"charges"`) {
		t.Errorf("GET /psp/charges?order_ref=1 = %d %s, want the PSP's list", status, body)
	}
	charge := `{"idempotency_key":"charge-1","order_ref":"1","customer_id":"c-1","amount_cents":100,"currency":"EUR"}`
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, "/psp/charges", charge},
		{http.MethodPost, "/psp/refunds", `{"idempotency_key":"refund-1","charge_id":"ch_1","amount_cents":100}`},
		{http.MethodPut, "/psp/switches", `{"mode":"decline","count":1}`},
		{http.MethodDelete, "/psp/charges/charge-1", ""},
	} {
		status, body := call(t, c.method, ts.URL+c.path, c.body)
		if status != http.StatusMethodNotAllowed || !strings.Contains(body, "#problem-method-not-allowed") {
			t.Errorf("%s %s = %d %s, want 405 as a problem document", c.method, c.path, status, body)
		}
	}
	var charges int
	if err := db.Get(&charges, "SELECT COUNT(*) FROM psp_charges"); err != nil || charges != 0 {
		t.Errorf("%d PSP charges (%v), want none", charges, err)
	}
	if status, body := call(t, http.MethodGet, ts.URL+"/psp/switches", ""); status != http.StatusOK || !strings.Contains(body, `"mode": "normal"`) {
		t.Errorf("GET /psp/switches = %d %s, want the switch untouched", status, body)
	}
}

// The outcome may ask the PSP, so it wants the admin token (when one is
// set) and is rate-limited.
func TestPaymentOutcomeWantsTheAdminToken(t *testing.T) {
	t.Parallel()
	ts, _ := serverWith(t, false, "", web.RequireToken("s3cret", false, "ADMIN_TOKEN"))
	outcome := func(auth string) int {
		return testutil.Call(t, http.MethodGet, ts.URL+"/payments/42/outcome", "", "Authorization", auth).Status
	}
	for _, auth := range []string{"", "Bearer wrong"} {
		if status := outcome(auth); status != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d, want 401", auth, status)
		}
	}
	if status := outcome(testutil.Bearer("s3cret")); status != http.StatusNotFound {
		t.Errorf("with the token: %d, want 404 (no such payment)", status)
	}
}

// GET /payments/{id}/outcome: 404 for an unknown order; the record's
// outcome once decided; "unknown" while open and the PSP cannot be asked.
func TestPaymentOutcome(t *testing.T) {
	t.Parallel()
	ts, db := server(t, false)
	ctx := context.Background()
	if status, body := call(t, http.MethodGet, ts.URL+"/payments/42/outcome", ""); status != http.StatusNotFound ||
		!strings.Contains(body, "payment not found") {
		t.Fatalf("unknown order: %d %s, want 404", status, body)
	}
	p, _ := payment.New(42, "c-1", 1500, "EUR")
	if err := sqldb.WithTx(ctx, db.DB, func(tx *sqlx.Tx) error { return paymentdb.Insert(ctx, tx, p, time.Minute, time.Minute) }); err != nil {
		t.Fatal(err)
	}
	outcome := func() map[string]string {
		t.Helper()
		status, body := call(t, http.MethodGet, ts.URL+"/payments/42/outcome", "")
		var got map[string]string
		if err := json.Unmarshal([]byte(body), &got); status != http.StatusOK || err != nil {
			t.Fatalf("GET /payments/42/outcome = %d %s", status, body)
		}
		return got
	}
	if got := outcome(); got["outcome"] != "unknown" || got["source"] != "psp" || got["payment_status"] != "pending" || got["order_id"] != "42" {
		t.Errorf("open, the PSP unreachable: %v, want unknown from the psp", got)
	}
	err := sqldb.WithTx(ctx, db.DB, func(tx *sqlx.Tx) error {
		_, err := paymentdb.Decide(ctx, tx, 42, paymentdb.Decision{From: payment.Pending, To: payment.Failed,
			PSPChargeID: "ch_1", FailureReason: "card_declined", Version: 2})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := outcome(); got["outcome"] != "declined" || got["source"] != "record" || got["psp_charge_id"] != "ch_1" {
		t.Errorf("declined: %v, want declined from the record", got)
	}
}
