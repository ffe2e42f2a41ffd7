package psp

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp/psptest"
)

// The PSP's writes are behind their keys: a charge or a refund wants
// PSP_TOKEN (the payment service's key), a switch change demo mode and
// ADMIN_TOKEN when set; reads pass. A refused write charges nothing.
func TestGuardKeepsWritesToTheirCallers(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "payment")
	srv := NewServer(db.DB, slog.New(slog.DiscardHandler))
	serve := func(a Access) string { return psptest.Serve(t, Guard(srv.Handler(), a, nil)) }
	keyed := serve(Access{Demo: true, AdminToken: "adm", Token: "psp-key"})
	closed := serve(Access{Demo: false})
	charge := `{"idempotency_key":"charge-9","order_ref":"9","customer_id":"c-1","amount_cents":100,"currency":"EUR"}`
	for _, c := range []struct {
		name, base, method, path, auth, body string
		status                               int
	}{
		{"charge, no key", keyed, "POST", "/charges", "", charge, 401},
		{"charge, the admin token", keyed, "POST", "/charges", "Bearer adm", charge, 401},
		{"refund, wrong key", keyed, "POST", "/refunds", "Bearer nope", `{"idempotency_key":"r","charge_id":"ch_1","amount_cents":1}`, 401},
		{"switch, no admin token", keyed, "PUT", "/switches", "", `{"mode":"decline"}`, 401},
		{"switch, the PSP key", keyed, "PUT", "/switches", "Bearer psp-key", `{"mode":"decline"}`, 401},
		{"charge, no key configured, not demo", closed, "POST", "/charges", "", charge, 403},
		{"switch, not demo", closed, "PUT", "/switches", "", `{"mode":"decline"}`, 403},
		{"read, no key", keyed, "GET", "/charges/charge-9", "", "", 404},
		{"read the switch, no key", keyed, "GET", "/switches", "", "", 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := testutil.Call(t, c.method, c.base+c.path, c.body, "Content-Type", "application/json", "Authorization", c.auth)
			if a.Status != c.status {
				t.Errorf("= %d, want %d", a.Status, c.status)
			}
		})
	}
	var charges int
	if err := db.Get(&charges, "SELECT COUNT(*) FROM psp_charges"); err != nil || charges != 0 {
		t.Fatalf("%d charges (%v) after refused writes, want 0", charges, err)
	}
	if sw := srv.CurrentSwitch(); sw.Mode != ModeNormal {
		t.Fatalf("switch %+v after refused changes, want normal", sw)
	}
	// With the key, the payment service's client charges (the refusals
	// above can fail: the same request with the key goes through).
	ch, err := NewClient(keyed, &http.Client{Timeout: 10 * time.Second}).WithToken("psp-key").Charge(context.Background(),
		ChargeRequest{IdempotencyKey: "charge-9", OrderRef: "9", CustomerID: "c-1", AmountCents: 100, Currency: "EUR"})
	if err != nil || ch.Status != StatusSucceeded {
		t.Errorf("charge with the key: %+v, %v", ch, err)
	}
}
