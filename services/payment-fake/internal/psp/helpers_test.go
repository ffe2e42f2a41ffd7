package psp

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp/psptest"
)

// testPSP is one PSP on its own database, served the way the payment-fake
// service serves it: mounted under /psp with the prefix stripped.
type testPSP struct {
	srv    *Server
	db     *sqldbtest.DB
	base   string // http://127.0.0.1:port/psp
	client *Client
}

func newTestPSP(t *testing.T) *testPSP {
	t.Helper()
	db := sqldbtest.New(t, "payment")
	srv := NewServer(db.DB, slog.New(slog.DiscardHandler))
	base := psptest.Serve(t, srv.Handler())
	return &testPSP{srv: srv, db: db, base: base, client: NewClient(base, &http.Client{Timeout: 10 * time.Second})}
}

// call sends one raw request and returns the status, headers and body.
func (p *testPSP) call(t *testing.T, method, path, body string) (int, http.Header, string) {
	t.Helper()
	ct := ""
	if body != "" {
		ct = "application/json"
	}
	a := testutil.Call(t, method, p.base+path, body, "Content-Type", ct)
	return a.Status, a.Header, a.Body
}

// chargeRows returns every row of psp_charges, oldest first.
func (p *testPSP) chargeRows(t *testing.T) []chargeRow {
	t.Helper()
	const q = `SELECT charge_id, idempotency_key, order_ref, customer_id, amount_cents, currency, status, decline_code, created_at
FROM psp_charges ORDER BY created_at, charge_id`
	var rows []chargeRow
	if err := p.db.SelectContext(context.Background(), &rows, q); err != nil {
		t.Fatal(err)
	}
	return rows
}

// chargeRowsByKey returns the rows of psp_charges with one idempotency key.
func (p *testPSP) chargeRowsByKey(t *testing.T, key string) []chargeRow {
	t.Helper()
	return slices.DeleteFunc(p.chargeRows(t), func(r chargeRow) bool { return r.IdempotencyKey != key })
}

// refundRows returns every row of psp_refunds, oldest first.
func (p *testPSP) refundRows(t *testing.T) []refundRow {
	t.Helper()
	const q = `SELECT refund_id, idempotency_key, charge_id, amount_cents, status, created_at
FROM psp_refunds ORDER BY created_at, refund_id`
	var rows []refundRow
	if err := p.db.SelectContext(context.Background(), &rows, q); err != nil {
		t.Fatal(err)
	}
	return rows
}

// mustCharge charges through the client and fails the test on any error.
func (p *testPSP) mustCharge(t *testing.T, req ChargeRequest) Charge {
	t.Helper()
	c, err := p.client.Charge(context.Background(), req)
	if err != nil {
		t.Fatalf("Charge(%+v): %v", req, err)
	}
	return c
}

// mustSetSwitch sets the fault switch over HTTP (PUT /switches).
func (p *testPSP) mustSetSwitch(t *testing.T, sw Switch) {
	t.Helper()
	body, err := json.Marshal(sw)
	if err != nil {
		t.Fatal(err)
	}
	if status, _, answer := p.call(t, http.MethodPut, "/switches", string(body)); status != http.StatusOK {
		t.Fatalf("PUT /switches %s = %d %s, want 200", body, status, answer)
	}
}

// getJSON sends GET path and decodes its answer into out; an answer other
// than 200 fails the test.
func (p *testPSP) getJSON(t *testing.T, path string, out any) {
	t.Helper()
	status, _, body := p.call(t, http.MethodGet, path, "")
	if status != http.StatusOK {
		t.Fatalf("GET %s = %d %s, want 200", path, status, body)
	}
	if err := json.Unmarshal([]byte(body), out); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

// postTwice sends the same POST twice: the first answer must be 201 (done
// now), the second 200 (the replay). It returns both, decoded as T, with
// their headers.
func postTwice[T any](t *testing.T, p *testPSP, path, body string) (first, replay T, h1, h2 http.Header) {
	t.Helper()
	status1, h1, body1 := p.call(t, http.MethodPost, path, body)
	status2, h2, body2 := p.call(t, http.MethodPost, path, body)
	if status1 != http.StatusCreated || status2 != http.StatusOK {
		t.Fatalf("statuses = %d, %d; want 201 then 200 (bodies %s / %s)", status1, status2, body1, body2)
	}
	for _, a := range []struct {
		body string
		into *T
	}{{body1, &first}, {body2, &replay}} {
		if err := json.Unmarshal([]byte(a.body), a.into); err != nil {
			t.Fatalf("POST %s: %v in %s", path, err, a.body)
		}
	}
	return first, replay, h1, h2
}

func chargeReq(key string) ChargeRequest {
	return ChargeRequest{IdempotencyKey: key, OrderRef: "42", CustomerID: "c-1", AmountCents: 1500, Currency: "EUR"}
}
