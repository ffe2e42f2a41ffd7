package paymenthttp_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/endpoints"
	"github.com/relmsg/ordersaga/pkg/sqldb"
	"github.com/relmsg/ordersaga/pkg/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentapp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentdb"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymenthttp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func server(t *testing.T, demoMode bool) (*httptest.Server, *sqldbtest.DB) {
	t.Helper()
	db := sqldbtest.New(t, "payment")
	r := chi.NewRouter()
	app := paymentapp.New(db.DB, psp.NewClient("http://127.0.0.1:1/psp", nil), quiet, nil, paymentapp.Config{})
	// The PSP as its process serves it: under /psp, switches guarded by
	// its own demo mode.
	pspMux := http.NewServeMux()
	pspMux.Handle("/psp/", http.StripPrefix("/psp", psp.GuardSwitches(psp.NewServer(db.DB, quiet).Handler(), demoMode, quiet)))
	pspTS := httptest.NewServer(pspMux)
	t.Cleanup(pspTS.Close)
	paymenthttp.Routes(r, app, endpoints.Must(pspTS.URL+"/psp"), quiet)
	ts := httptest.NewServer(r)
	t.Cleanup(ts.Close)
	return ts, db
}

func call(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
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

// /psp on the payment service passes through to the PSP process; the
// PSP's fault switch changes only in its demo mode.
func TestPSPMount(t *testing.T) {
	t.Parallel()
	const sw = `{"mode":"error-5xx","delay_ms":0,"count":1}`
	tests := []struct {
		demo       bool
		wantPut    int
		wantSwitch string
	}{
		{demo: false, wantPut: http.StatusForbidden, wantSwitch: `"mode": "normal"`},
		{demo: true, wantPut: http.StatusOK, wantSwitch: `"mode": "error-5xx"`},
	}
	for _, tt := range tests {
		ts, _ := server(t, tt.demo)
		if status, body := call(t, http.MethodGet, ts.URL+"/psp/charges/nope", ""); status != http.StatusNotFound {
			t.Errorf("demo=%v: GET /psp/charges/nope = %d %s, want the PSP's 404", tt.demo, status, body)
		}
		if status, body := call(t, http.MethodPut, ts.URL+"/psp/switches", sw); status != tt.wantPut {
			t.Errorf("demo=%v: PUT /psp/switches = %d %s, want %d", tt.demo, status, body, tt.wantPut)
		}
		if status, body := call(t, http.MethodGet, ts.URL+"/psp/switches", ""); status != http.StatusOK || !strings.Contains(body, tt.wantSwitch) {
			t.Errorf("demo=%v: GET /psp/switches = %d %s, want 200 with %s", tt.demo, status, body, tt.wantSwitch)
		}
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
