package psp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/wire"
)

func TestRefundIdempotent(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)
	c := p.mustCharge(t, chargeReq("order-42-charge"))

	body := fmt.Sprintf(`{"idempotency_key":"order-42-refund","charge_id":%q,"amount_cents":1500}`, c.ChargeID)
	f1, f2, _, _ := postTwice[Refund](t, p, "/refunds", body)
	if f1 != f2 || !strings.HasPrefix(f1.RefundID, "re_") || f1.Status != StatusSucceeded || f1.ChargeID != c.ChargeID {
		t.Errorf("answers %+v and %+v, want one succeeded re_ refund of %s", f1, f2, c.ChargeID)
	}
	// The replay of the refund that used up the whole charge still answers
	// with the stored refund, not "exceeds the charged amount".
	rows := p.refundRows(t)
	if len(rows) != 1 || rows[0].refund() != f1 || rows[0].AmountCents != 1500 {
		t.Fatalf("psp_refunds = %+v, want exactly the refund %+v", rows, f1)
	}

	got, err := p.client.GetRefund(context.Background(), "order-42-refund")
	if err != nil || got != f1 {
		t.Errorf("GetRefund = %+v, %v; want %+v", got, err, f1)
	}
	if _, err := p.client.GetRefund(context.Background(), "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetRefund(unknown) error = %v, want ErrNotFound", err)
	}
	var list wire.PSPRefundList
	p.getJSON(t, "/refunds?charge_id="+c.ChargeID, &list)
	if len(list.Refunds) != 1 || list.Refunds[0] != f1 {
		t.Errorf("GET /refunds?charge_id=%s = %+v, want [%+v]", c.ChargeID, list.Refunds, f1)
	}
}

func TestRefundRules(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)
	ctx := context.Background()
	ok := p.mustCharge(t, chargeReq("charge-ok")) // 1500 cents
	declined := p.mustCharge(t, ChargeRequest{IdempotencyKey: "charge-declined", OrderRef: "43", CustomerID: "decline-1", AmountCents: 1500, Currency: "EUR"})

	partial, err := p.client.Refund(ctx, RefundRequest{IdempotencyKey: "refund-1", ChargeID: ok.ChargeID, AmountCents: 1000})
	if err != nil {
		t.Fatalf("partial refund: %v", err)
	}

	tests := []struct {
		name       string
		req        RefundRequest
		wantStatus int
		wantMsg    string
	}{
		{"over the rest", RefundRequest{IdempotencyKey: "refund-2", ChargeID: ok.ChargeID, AmountCents: 501}, 422, "refund exceeds the charged amount: 501 cents asked, 1500 charged, 1000 already refunded"},
		{"over the charge", RefundRequest{IdempotencyKey: "refund-3", ChargeID: ok.ChargeID, AmountCents: 1501}, 422, "refund exceeds the charged amount"},
		{"declined charge", RefundRequest{IdempotencyKey: "refund-4", ChargeID: declined.ChargeID, AmountCents: 100}, 422, "charge was declined: nothing to refund"},
		{"unknown charge", RefundRequest{IdempotencyKey: "refund-5", ChargeID: "ch_nope", AmountCents: 100}, 422, "no charge with this charge_id"},
		{"key reused, other amount", RefundRequest{IdempotencyKey: "refund-1", ChargeID: ok.ChargeID, AmountCents: 999}, 409, "idempotency key reused with different parameters"},
		{"key reused, other charge", RefundRequest{IdempotencyKey: "refund-1", ChargeID: "ch_nope", AmountCents: 1000}, 409, "idempotency key reused with different parameters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.client.Refund(ctx, tt.req)
			var ae *APIError
			if !errors.As(err, &ae) || errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("error = %v, want an *APIError that is not ErrOutcomeUnknown", err)
			}
			if ae.Status != tt.wantStatus || !strings.HasPrefix(ae.Message, tt.wantMsg) {
				t.Errorf("answer = %d %q, want %d %q", ae.Status, ae.Message, tt.wantStatus, tt.wantMsg)
			}
		})
	}

	rest, err := p.client.Refund(ctx, RefundRequest{IdempotencyKey: "refund-6", ChargeID: ok.ChargeID, AmountCents: 500})
	if err != nil {
		t.Fatalf("refund of the exact rest: %v", err)
	}
	rows := p.refundRows(t)
	var sum int64
	for _, r := range rows {
		if r.ChargeID != ok.ChargeID || r.Status != StatusSucceeded {
			t.Errorf("refund row %+v, want only succeeded refunds of %s", r, ok.ChargeID)
		}
		sum += r.AmountCents
	}
	if len(rows) != 2 || sum != 1500 || rows[0].RefundID != partial.RefundID || rows[1].RefundID != rest.RefundID {
		t.Errorf("psp_refunds = %+v (sum %d), want the 1000 and 500 refunds only", rows, sum)
	}
}

// Ten refunds with different keys race for a charge that can take only one
// of them: the charge row lock decides them one after the other.
func TestRefundConcurrentOneWinner(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)
	c := p.mustCharge(t, chargeReq("charge-race")) // 1500 cents
	const n = 10

	errs := make([]error, n)
	testutil.Together(n, func(i int) {
		_, errs[i] = p.client.Refund(context.Background(), RefundRequest{
			IdempotencyKey: fmt.Sprintf("refund-%d", i), ChargeID: c.ChargeID, AmountCents: 1000})
	})

	won := 0
	for i, err := range errs {
		var ae *APIError
		switch {
		case err == nil:
			won++
		case errors.As(err, &ae) && ae.Status == http.StatusUnprocessableEntity:
		default:
			t.Errorf("refund %d: %v, want success or 422", i, err)
		}
	}
	rows := p.refundRows(t)
	if won != 1 || len(rows) != 1 || rows[0].AmountCents != 1000 {
		t.Errorf("%d refunds succeeded, psp_refunds = %+v; want exactly one refund of 1000", won, rows)
	}
}

func TestRefundBadInput(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)
	c := p.mustCharge(t, chargeReq("charge-1"))

	tests := []struct {
		name, body string
		wantStatus int
	}{
		{"malformed JSON", `{"idempotency_key":`, http.StatusBadRequest},
		{"unknown field", fmt.Sprintf(`{"idempotency_key":"r1","charge_id":%q,"amount_cents":100,"reason":"x"}`, c.ChargeID), http.StatusBadRequest},
		{"negative amount", fmt.Sprintf(`{"idempotency_key":"r1","charge_id":%q,"amount_cents":-100}`, c.ChargeID), http.StatusUnprocessableEntity},
		{"zero amount", fmt.Sprintf(`{"idempotency_key":"r1","charge_id":%q,"amount_cents":0}`, c.ChargeID), http.StatusUnprocessableEntity},
		{"missing key", fmt.Sprintf(`{"charge_id":%q,"amount_cents":100}`, c.ChargeID), http.StatusUnprocessableEntity},
		{"missing charge", `{"idempotency_key":"r1","amount_cents":100}`, http.StatusUnprocessableEntity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := p.call(t, http.MethodPost, "/refunds", tt.body)
			if status != tt.wantStatus || !strings.Contains(body, `"error"`) {
				t.Errorf("status = %d %s, want %d with a JSON error", status, body, tt.wantStatus)
			}
		})
	}
	if rows := p.refundRows(t); len(rows) != 0 {
		t.Errorf("psp_refunds has %d rows after bad input only, want 0", len(rows))
	}
	status, _, _ := p.call(t, http.MethodGet, "/refunds", "")
	if status != http.StatusBadRequest {
		t.Errorf("GET /refunds without charge_id = %d, want 400", status)
	}
}
