package payment

import (
	"errors"
	"strings"
	"testing"
)

// Every (status, trigger) pair: the legal moves go where the saga says, and
// nothing else moves a payment. Terminal statuses accept nothing.
func TestTransitionTable(t *testing.T) {
	want := map[Status]map[Trigger]Status{
		Pending: {ChargeSucceeded: Succeeded, ChargeDeclined: Failed},
	}
	for _, s := range Statuses {
		for _, tr := range Triggers {
			got, ok := Next(s, tr)
			wantTo, wantOK := want[s][tr]
			if ok != wantOK || got != wantTo {
				t.Errorf("Next(%s, %s) = (%q, %v), want (%q, %v)", s, tr, got, ok, wantTo, wantOK)
			}
			if s.Terminal() && ok {
				t.Errorf("terminal status %s accepted %s", s, tr)
			}
			if ok && !got.Valid() {
				t.Errorf("Next(%s, %s) leads to unknown status %q", s, tr, got)
			}
		}
	}
}

func TestTerminal(t *testing.T) {
	for _, s := range Statuses {
		want := s == Succeeded || s == Failed
		if s.Terminal() != want {
			t.Errorf("%s.Terminal() = %v, want %v", s, s.Terminal(), want)
		}
	}
	if Status("refunded").Valid() {
		t.Errorf("refunded is not a status yet")
	}
}

func TestChargeKey(t *testing.T) {
	if got := ChargeKey(42); got != "charge-42" {
		t.Errorf("ChargeKey(42) = %q, want charge-42", got)
	}
}

func TestNew(t *testing.T) {
	p, err := New(42, "c-1", 1500, "EUR")
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	want := Payment{OrderID: 42, CustomerID: "c-1", AmountCents: 1500, Currency: "EUR", Status: Pending,
		IdempotencyKey: "charge-42", Version: 1}
	if p != want {
		t.Errorf("New = %+v, want %+v", p, want)
	}

	tests := []struct {
		name       string
		order      uint64
		customer   string
		amount     int64
		currency   string
		wantSubstr string
	}{
		{"no order", 0, "c-1", 1, "EUR", "order id"},
		{"no customer", 1, "", 1, "EUR", "customer"},
		{"padded customer", 1, " c-1", 1, "EUR", "customer"},
		{"long customer", 1, strings.Repeat("c", 65), 1, "EUR", "customer"},
		{"zero amount", 1, "c-1", 0, "EUR", "amount"},
		{"negative amount", 1, "c-1", -5, "EUR", "amount"},
		{"lower-case currency", 1, "c-1", 1, "eur", "currency"},
		{"long currency", 1, "c-1", 1, "EURO", "currency"},
	}
	for _, tt := range tests {
		_, err := New(tt.order, tt.customer, tt.amount, tt.currency)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantSubstr) {
			t.Errorf("%s: New = %v, want ErrInvalid mentioning %q", tt.name, err, tt.wantSubstr)
		}
	}
}
