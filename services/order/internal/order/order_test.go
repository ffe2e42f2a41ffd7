package order

import (
	"errors"
	"strings"
	"testing"
)

// Every (status, trigger) pair: the legal moves go where the saga says, and
// nothing else moves an order. Terminal statuses accept nothing.
func TestTransitionTable(t *testing.T) {
	want := map[Status]map[Trigger]Status{
		PendingInventory: {InventoryReserved: AwaitingPayment, InventoryRejected: Rejected, CancelRequested: Cancelled,
			PaymentSucceeded: Confirmed, PaymentFailed: Cancelled},
		AwaitingPayment: {PaymentSucceeded: Confirmed, PaymentFailed: Cancelled, CancelRequested: Cancelled},
		Confirmed:       {CancelRequested: Cancelled, InventoryCommitFailed: Cancelled},
	}
	for _, s := range Statuses {
		for _, tr := range Triggers {
			got, ok := Next(s, tr)
			wantTo, wantOK := want[s][tr]
			if ok != wantOK || got != wantTo {
				t.Errorf("Next(%s, %s) = (%q, %v), want (%q, %v)", s, tr, got, ok, wantTo, wantOK)
			}
			// Terminal statuses accept nothing, except the cancel of a
			// confirmed order (a new business transaction: refund and
			// restock). Nothing ever leads back to a non-terminal status.
			if s.Terminal() && ok && !(s == Confirmed && (tr == CancelRequested || tr == InventoryCommitFailed)) {
				t.Errorf("terminal status %s accepted %s", s, tr)
			}
			if s.Terminal() && ok && !got.Terminal() {
				t.Errorf("terminal status %s moved back to %s", s, got)
			}
		}
	}
}

func TestRefund(t *testing.T) {
	tests := []struct {
		from    Status
		current RefundStatus
		t       Trigger
		want    RefundStatus
	}{
		{Confirmed, RefundNone, CancelRequested, RefundPending},
		{Confirmed, RefundNone, InventoryCommitFailed, RefundPending},
		{AwaitingPayment, RefundNone, CancelRequested, RefundNone}, // payment decides
		{PendingInventory, RefundNone, CancelRequested, RefundNone},
		{Cancelled, RefundNone, PaymentSucceeded, RefundPending}, // late payment after cancel
		{Cancelled, RefundPending, PaymentSucceeded, RefundPending},
		{Cancelled, RefundPending, PaymentRefunded, RefundRefunded},
		{Cancelled, RefundRefunded, PaymentSucceeded, RefundRefunded},
		{AwaitingPayment, RefundNone, PaymentSucceeded, RefundNone},
	}
	for _, tt := range tests {
		if got := Refund(tt.from, tt.current, tt.t); got != tt.want {
			t.Errorf("Refund(%s, %s, %s) = %s, want %s", tt.from, tt.current, tt.t, got, tt.want)
		}
	}
}

func TestTerminal(t *testing.T) {
	for _, s := range Statuses {
		want := s == Confirmed || s == Rejected || s == Cancelled
		if s.Terminal() != want {
			t.Errorf("%s.Terminal() = %v, want %v", s, s.Terminal(), want)
		}
	}
}

func TestRequestValidate(t *testing.T) {
	ok := []Line{{SKU: "SKU-1", Quantity: 2}}
	many := make([]Line, MaxLines+1)
	for i := range many {
		many[i] = Line{SKU: "S" + strings.Repeat("x", i%5) + string(rune('a'+i%26)) + string(rune('a'+i/26)), Quantity: 1}
	}
	tests := []struct {
		name string
		req  Request
		want string // substring of the error; "" for valid
	}{
		{"valid", Request{CustomerID: "c-1", Lines: ok}, ""},
		{"no customer", Request{Lines: ok}, "customer_id"},
		{"customer with spaces", Request{CustomerID: "c 1", Lines: ok}, "customer_id"},
		{"customer too long", Request{CustomerID: strings.Repeat("c", 65), Lines: ok}, "customer_id"},
		{"no items", Request{CustomerID: "c-1"}, "must not be empty"},
		{"too many items", Request{CustomerID: "c-1", Lines: many}, "at most"},
		{"zero quantity", Request{CustomerID: "c-1", Lines: []Line{{SKU: "SKU-1"}}}, "quantity"},
		{"negative quantity", Request{CustomerID: "c-1", Lines: []Line{{SKU: "SKU-1", Quantity: -1}}}, "quantity"},
		{"absurd quantity", Request{CustomerID: "c-1", Lines: []Line{{SKU: "SKU-1", Quantity: MaxQuantity + 1}}}, "quantity"},
		{"empty sku", Request{CustomerID: "c-1", Lines: []Line{{Quantity: 1}}}, "sku"},
		{"duplicate sku", Request{CustomerID: "c-1", Lines: []Line{{SKU: "SKU-1", Quantity: 1}, {SKU: "SKU-1", Quantity: 2}}}, "twice"},
	}
	for _, tt := range tests {
		err := tt.req.Validate()
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s: Validate() = %v, want nil", tt.name, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Validate() = %v, want ErrInvalid mentioning %q", tt.name, err, tt.want)
		}
	}
}

func TestPrice(t *testing.T) {
	cat := map[string]Product{
		"A": {SKU: "A", PriceCents: 250, Currency: "EUR"},
		"B": {SKU: "B", PriceCents: 1000, Currency: "EUR"},
		"U": {SKU: "U", PriceCents: 1, Currency: "USD"},
	}
	items, total, cur, err := Price(Request{CustomerID: "c", Lines: []Line{{"A", 3}, {"B", 2}}}, cat)
	if err != nil || total != 2750 || cur != "EUR" || len(items) != 2 || items[0].UnitPriceCents != 250 {
		t.Fatalf("Price = %v, %d, %q, %v; want 2 items, 2750 EUR", items, total, cur, err)
	}
	if _, _, _, err := Price(Request{Lines: []Line{{"Z", 1}}}, cat); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown sku: err = %v, want ErrInvalid", err)
	}
	if _, _, _, err := Price(Request{Lines: []Line{{"A", 1}, {"U", 1}}}, cat); !errors.Is(err, ErrInvalid) {
		t.Fatalf("mixed currencies: err = %v, want ErrInvalid", err)
	}
}
