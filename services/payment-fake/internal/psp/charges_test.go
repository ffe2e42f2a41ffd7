package psp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/wire"
)

const chargeBody = `{"idempotency_key":"order-42-charge","order_ref":"42","customer_id":"c-1","amount_cents":1500,"currency":"EUR"}`

func TestChargeIdempotent(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)

	c1, c2, h1, h2 := postTwice[Charge](t, p, "/charges", chargeBody)
	if h1.Get("Idempotent-Replayed") != "" || h2.Get("Idempotent-Replayed") != "true" {
		t.Errorf("Idempotent-Replayed = %q, %q; want \"\" then \"true\"", h1.Get("Idempotent-Replayed"), h2.Get("Idempotent-Replayed"))
	}
	if c1 != c2 {
		t.Errorf("second answer differs from the first:\n got %+v\nwant %+v", c2, c1)
	}
	if !strings.HasPrefix(c1.ChargeID, "ch_") || c1.Status != StatusSucceeded || c1.DeclineCode != "" {
		t.Errorf("charge = %+v, want a ch_ id, status succeeded, no decline code", c1)
	}

	rows := p.chargeRows(t)
	if len(rows) != 1 {
		t.Fatalf("psp_charges has %d rows, want 1", len(rows))
	}
	r := rows[0]
	if r.ChargeID != c1.ChargeID || r.IdempotencyKey != "order-42-charge" || r.OrderRef != "42" ||
		r.CustomerID != "c-1" || r.AmountCents != 1500 || r.Currency != "EUR" || r.Status != StatusSucceeded {
		t.Errorf("row = %+v, want the charge %+v", r, c1)
	}
	if got := r.charge(); got != c1 {
		t.Errorf("stored charge %+v differs from the answer %+v", got, c1)
	}
}

// Twenty callers released together with one key: the unique key lets exactly
// one INSERT through; everyone gets that charge.
func TestChargeConcurrentSameKey(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)
	const n = 20

	type result struct {
		status int
		charge Charge
		err    error
	}
	results := make([]result, n)
	testutil.Together(n, func(i int) {
		req, err := http.NewRequest(http.MethodPost, p.base+"/charges", strings.NewReader(chargeBody))
		if err != nil {
			results[i].err = err
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			results[i].err = err
			return
		}
		defer resp.Body.Close()
		results[i].status = resp.StatusCode
		results[i].err = json.NewDecoder(resp.Body).Decode(&results[i].charge)
	})

	created := 0
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("caller %d: %v", i, r.err)
		}
		switch r.status {
		case http.StatusCreated:
			created++
		case http.StatusOK:
		default:
			t.Fatalf("caller %d: status %d, want 201 or 200", i, r.status)
		}
		if r.charge.ChargeID != results[0].charge.ChargeID {
			t.Errorf("caller %d got charge %s, caller 0 got %s", i, r.charge.ChargeID, results[0].charge.ChargeID)
		}
	}
	if created != 1 {
		t.Errorf("%d callers got 201, want exactly 1", created)
	}
	rows := p.chargeRows(t)
	if len(rows) != 1 {
		t.Fatalf("psp_charges has %d rows, want 1", len(rows))
	}
	if rows[0].ChargeID != results[0].charge.ChargeID || rows[0].AmountCents != 1500 {
		t.Errorf("row = %+v, want charge %s of 1500 cents", rows[0], results[0].charge.ChargeID)
	}
}

func TestChargeKeyReusedWithOtherParameters(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)
	first := p.mustCharge(t, chargeReq("k-reuse"))

	tests := []struct {
		name   string
		change func(*ChargeRequest)
	}{
		{"amount", func(r *ChargeRequest) { r.AmountCents = 1600 }},
		{"currency", func(r *ChargeRequest) { r.Currency = "USD" }},
		{"order_ref", func(r *ChargeRequest) { r.OrderRef = "43" }},
		{"customer", func(r *ChargeRequest) { r.CustomerID = "c-2" }},
		{"customer case", func(r *ChargeRequest) { r.CustomerID = "C-1" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := chargeReq("k-reuse")
			tt.change(&req)
			b, _ := json.Marshal(req)
			status, _, body := p.call(t, http.MethodPost, "/charges", string(b))
			if status != http.StatusConflict {
				t.Fatalf("status = %d (%s), want 409", status, body)
			}
			if want := "idempotency key reused with different parameters"; problemDetail(t, body) != want {
				t.Errorf("body = %s, want a problem saying %s", body, want)
			}
		})
	}

	rows := p.chargeRows(t)
	if len(rows) != 1 {
		t.Fatalf("psp_charges has %d rows, want 1", len(rows))
	}
	if got := rows[0].charge(); got != first {
		t.Errorf("stored charge = %+v, want it unchanged: %+v", got, first)
	}
}

func TestDeclineRules(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)

	tests := []struct {
		customer    string
		amount      int64
		wantStatus  string
		wantDecline string
	}{
		{"c-1", 1500, StatusSucceeded, ""},
		{"c-1", MaxAmountCents, StatusSucceeded, ""},
		{"c-1", MaxAmountCents + 1, StatusDeclined, DeclineAmountLimit},
		{"decline", 1500, StatusDeclined, DeclineCardDeclined},
		{"decline-me", 1500, StatusDeclined, DeclineCardDeclined},
		{"decline-me", MaxAmountCents + 1, StatusDeclined, DeclineCardDeclined}, // customer rule first
		{"c-decline", 1500, StatusSucceeded, ""},                                // prefix only
		{"Decline-me", 1500, StatusSucceeded, ""},                               // case-sensitive
	}
	for i, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d", tt.customer, tt.amount), func(t *testing.T) {
			req := ChargeRequest{IdempotencyKey: fmt.Sprintf("k-%d", i), OrderRef: fmt.Sprint(100 + i),
				CustomerID: tt.customer, AmountCents: tt.amount, Currency: "EUR"}
			c, err := p.client.Charge(context.Background(), req)
			if err != nil {
				t.Fatalf("Charge: %v (a decline is an answer, not an error)", err)
			}
			if c.Status != tt.wantStatus || c.DeclineCode != tt.wantDecline {
				t.Errorf("status, decline_code = %q, %q; want %q, %q", c.Status, c.DeclineCode, tt.wantStatus, tt.wantDecline)
			}
			again, err := p.client.Charge(context.Background(), req)
			if err != nil || again != c {
				t.Errorf("replay = %+v, %v; want the stored charge %+v", again, err, c)
			}
			rows := p.chargeRowsByKey(t, req.IdempotencyKey)
			if len(rows) != 1 {
				t.Fatalf("%d rows for key %s, want 1", len(rows), req.IdempotencyKey)
			}
			if rows[0].Status != tt.wantStatus || rows[0].DeclineCode != tt.wantDecline || rows[0].AmountCents != tt.amount {
				t.Errorf("row = %+v, want status %q, decline_code %q, amount %d", rows[0], tt.wantStatus, tt.wantDecline, tt.amount)
			}
		})
	}
}

func TestChargeBadInput(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)

	tests := []struct {
		name, body  string
		contentType string
		wantStatus  int
	}{
		{"malformed JSON", `{"idempotency_key":"k1",`, "application/json", http.StatusBadRequest},
		{"unknown field", `{"idempotency_key":"k1","order_ref":"42","customer_id":"c-1","amount_cents":1500,"currency":"EUR","tip":1}`, "application/json", http.StatusBadRequest},
		{"two objects", chargeBody + chargeBody, "application/json", http.StatusBadRequest},
		{"amount as string", `{"idempotency_key":"k1","order_ref":"42","customer_id":"c-1","amount_cents":"1500","currency":"EUR"}`, "application/json", http.StatusBadRequest},
		{"fractional amount", `{"idempotency_key":"k1","order_ref":"42","customer_id":"c-1","amount_cents":15.5,"currency":"EUR"}`, "application/json", http.StatusBadRequest},
		{"empty body", ``, "application/json", http.StatusBadRequest},
		{"not JSON content type", chargeBody, "text/plain", http.StatusUnsupportedMediaType},
		{"negative amount", `{"idempotency_key":"k1","order_ref":"42","customer_id":"c-1","amount_cents":-1500,"currency":"EUR"}`, "application/json", http.StatusUnprocessableEntity},
		{"zero amount", `{"idempotency_key":"k1","order_ref":"42","customer_id":"c-1","amount_cents":0,"currency":"EUR"}`, "application/json", http.StatusUnprocessableEntity},
		{"missing key", `{"order_ref":"42","customer_id":"c-1","amount_cents":1500,"currency":"EUR"}`, "application/json", http.StatusUnprocessableEntity},
		{"key with space", `{"idempotency_key":"k 1","order_ref":"42","customer_id":"c-1","amount_cents":1500,"currency":"EUR"}`, "application/json", http.StatusUnprocessableEntity},
		{"key too long", `{"idempotency_key":"` + strings.Repeat("k", 129) + `","order_ref":"42","customer_id":"c-1","amount_cents":1500,"currency":"EUR"}`, "application/json", http.StatusUnprocessableEntity},
		{"missing order_ref", `{"idempotency_key":"k1","customer_id":"c-1","amount_cents":1500,"currency":"EUR"}`, "application/json", http.StatusUnprocessableEntity},
		{"missing customer", `{"idempotency_key":"k1","order_ref":"42","amount_cents":1500,"currency":"EUR"}`, "application/json", http.StatusUnprocessableEntity},
		{"lower-case currency", `{"idempotency_key":"k1","order_ref":"42","customer_id":"c-1","amount_cents":1500,"currency":"eur"}`, "application/json", http.StatusUnprocessableEntity},
		{"long currency", `{"idempotency_key":"k1","order_ref":"42","customer_id":"c-1","amount_cents":1500,"currency":"EURO"}`, "application/json", http.StatusUnprocessableEntity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, p.base+"/charges", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", tt.contentType)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e struct {
				Error string `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Error == "" {
				t.Errorf("body is not a JSON error: %v %+v", err, e)
			}
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status = %d (%s), want %d", resp.StatusCode, e.Error, tt.wantStatus)
			}
		})
	}
	if rows := p.chargeRows(t); len(rows) != 0 {
		t.Errorf("psp_charges has %d rows after bad input only, want 0: %+v", len(rows), rows)
	}
}

func TestChargeStatusQueries(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)
	ctx := context.Background()

	a := p.mustCharge(t, ChargeRequest{IdempotencyKey: "order-7-charge-1", OrderRef: "7", CustomerID: "c-1", AmountCents: 700, Currency: "EUR"})
	b := p.mustCharge(t, ChargeRequest{IdempotencyKey: "order-7-charge-2", OrderRef: "7", CustomerID: "decline-x", AmountCents: 700, Currency: "EUR"})
	p.mustCharge(t, ChargeRequest{IdempotencyKey: "order-8-charge", OrderRef: "8", CustomerID: "c-1", AmountCents: 800, Currency: "EUR"})
	// A key with characters that need escaping in a URL path.
	odd := p.mustCharge(t, ChargeRequest{IdempotencyKey: "order/9?charge#1%", OrderRef: "9", CustomerID: "c-1", AmountCents: 900, Currency: "EUR"})

	got, err := p.client.GetCharge(ctx, "order-7-charge-1")
	if err != nil || got != a {
		t.Errorf("GetCharge = %+v, %v; want %+v", got, err, a)
	}
	got, err = p.client.GetCharge(ctx, "order/9?charge#1%")
	if err != nil || got != odd {
		t.Errorf("GetCharge(key needing escapes) = %+v, %v; want %+v", got, err, odd)
	}
	_, err = p.client.GetCharge(ctx, "no-such-key")
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("GetCharge(unknown) error = %v, want ErrNotFound", err)
	}
	status, _, body := p.call(t, http.MethodGet, "/charges/no-such-key", "")
	if want := "no charge with this idempotency key"; status != http.StatusNotFound || problemDetail(t, body) != want {
		t.Errorf("GET unknown charge = %d %s, want a 404 problem saying %s", status, body, want)
	}

	var list wire.ChargeList
	p.getJSON(t, "/charges?order_ref=7", &list)
	if len(list.Charges) != 2 || list.Charges[0] != a || list.Charges[1] != b {
		t.Errorf("GET /charges?order_ref=7 = %+v, want [%+v %+v]", list.Charges, a, b)
	}
	status, _, body = p.call(t, http.MethodGet, "/charges?order_ref=999", "")
	if status != http.StatusOK || compactJSON(t, body) != `{"charges":[]}` {
		t.Errorf("GET charges of an order without any = %d %s, want 200 {\"charges\":[]}", status, body)
	}
	status, _, _ = p.call(t, http.MethodGet, "/charges", "")
	if status != http.StatusBadRequest {
		t.Errorf("GET /charges without order_ref = %d, want 400", status)
	}
	status, _, body = p.call(t, http.MethodDelete, "/charges/order-7-charge-1", "")
	if status != http.StatusNotFound || !strings.Contains(body, `"error"`) {
		t.Errorf("DELETE charge = %d %s, want a JSON 404", status, body)
	}
}

func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %q: %v", s, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// problemDetail is the detail of a problem document (and checks that its
// old "error" member says the same).
func problemDetail(t *testing.T, body string) string {
	t.Helper()
	var p struct {
		Type   string `json:"type"`
		Detail string `json:"detail"`
		Error  string `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil || p.Type == "" || p.Error != p.Detail {
		t.Errorf("not a problem document: %s (%v)", body, err)
	}
	return p.Detail
}
