package payment

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// Every (status, trigger) pair, the unstored start included: the legal
// moves go where the saga says, and nothing else moves a payment. Terminal
// statuses accept nothing.
func TestTransitionTable(t *testing.T) {
	want := map[Status]map[Trigger]Status{
		NoPayment: {Reserve: Pending, Cancel: CancelledBeforeCharge},
		Pending: {ChargeSucceeded: Succeeded, ChargeDeclined: Failed, Cancel: Pending, Withdraw: Withdrawn,
			Park: NeedsAttention, Void: CancelledBeforeCharge},
		NeedsAttention: {ChargeSucceeded: Succeeded, ChargeDeclined: Failed, Cancel: NeedsAttention,
			Withdraw: Withdrawn, Retry: Pending},
		Succeeded:             {Cancel: Succeeded, RefundCompleted: Refunded},
		CancelledBeforeCharge: {ChargeSucceeded: Succeeded, ChargeDeclined: Failed},
	}
	walkTable(t, "Next", append([]Status{NoPayment}, Statuses...), Triggers, Next, want, Status.Terminal, Status.Valid)
}

// walkTable checks next, a transition function, on every (status, trigger)
// pair against want (a pair not in it: no move), that a terminal status
// accepts nothing, and that every move leads to a valid status.
func walkTable[S ~string, T ~string](t *testing.T, name string, statuses []S, triggers []T, next func(S, T) (S, bool),
	want map[S]map[T]S, terminal, valid func(S) bool) {
	t.Helper()
	for _, s := range statuses {
		for _, tr := range triggers {
			got, ok := next(s, tr)
			wantTo, wantOK := want[s][tr]
			if ok != wantOK || got != wantTo {
				t.Errorf("%s(%q, %s) = (%q, %v), want (%q, %v)", name, s, tr, got, ok, wantTo, wantOK)
			}
			if terminal(s) && ok {
				t.Errorf("terminal status %s accepted %s", s, tr)
			}
			if ok && !valid(got) {
				t.Errorf("%s(%q, %s) leads to unknown status %q", name, s, tr, got)
			}
		}
	}
}

func TestTerminal(t *testing.T) {
	for _, s := range Statuses {
		want := s == Failed || s == Refunded || s == Withdrawn
		if s.Terminal() != want {
			t.Errorf("%s.Terminal() = %v, want %v", s, s.Terminal(), want)
		}
	}
	if NoPayment.Valid() || Status("cancelled").Valid() {
		t.Errorf("the unstored start or an unknown status is valid")
	}
}

func TestRefundTransitionTable(t *testing.T) {
	want := map[RefundStatus]map[RefundTrigger]RefundStatus{
		NoRefund:             {RequestRefund: RefundRequested},
		RefundRequested:      {RefundDone: RefundSucceeded, RefundPark: RefundNeedsAttention},
		RefundNeedsAttention: {RefundDone: RefundSucceeded, RefundRetry: RefundRequested},
	}
	walkTable(t, "NextRefund", append([]RefundStatus{NoRefund}, RefundStatuses...), RefundTriggers, NextRefund, want,
		RefundStatus.Terminal, func(s RefundStatus) bool { return slices.Contains(RefundStatuses, s) })
}

// A payment owes a refund exactly when it was charged and its order was
// cancelled, whichever of the two came first.
func TestRefundDue(t *testing.T) {
	for _, s := range Statuses {
		for _, cancelled := range []bool{false, true} {
			p := Payment{Status: s, CancelRequested: cancelled}
			if got, want := p.RefundDue(), s == Succeeded && cancelled; got != want {
				t.Errorf("RefundDue(%s, cancelled=%v) = %v, want %v", s, cancelled, got, want)
			}
		}
	}
}

// At the deadline only a cancelled order the PSP has no charge for is
// closed; every other unknown outcome is parked, never failed.
func TestAtDeadline(t *testing.T) {
	tests := []struct {
		cancelled, noCharge bool
		want                Trigger
	}{
		{false, false, Park},
		{false, true, Park},
		{true, false, Park},
		{true, true, Void},
	}
	for _, tt := range tests {
		if got := AtDeadline(Payment{Status: Pending, CancelRequested: tt.cancelled}, tt.noCharge); got != tt.want {
			t.Errorf("AtDeadline(cancelled=%v, no charge=%v) = %s, want %s", tt.cancelled, tt.noCharge, got, tt.want)
		}
	}
}

// A cancel withdraws a payment only while its charge was never sent and no
// cancel came before; every other payment keeps the cancel for its
// outcome (or its refund).
func TestCancelTrigger(t *testing.T) {
	for _, s := range Statuses {
		for _, sent := range []bool{false, true} {
			for _, cancelled := range []bool{false, true} {
				p := Payment{Status: s, ChargeSent: sent, CancelRequested: cancelled}
				want := Cancel
				if (s == Pending || s == NeedsAttention) && !sent && !cancelled {
					want = Withdraw
				}
				if got := p.CancelTrigger(); got != want {
					t.Errorf("CancelTrigger(%s, sent=%v, cancelled=%v) = %s, want %s", s, sent, cancelled, got, want)
				}
			}
		}
	}
}

func TestMarker(t *testing.T) {
	m := Marker(7, "cancelled before inventory.reserved")
	if !m.IsMarker() || m.Status != CancelledBeforeCharge || !m.CancelRequested || m.IdempotencyKey != "charge-7" {
		t.Errorf("Marker = %+v", m)
	}
	p, _ := New(7, "c-1", 100, "EUR")
	p.Status = CancelledBeforeCharge
	if p.IsMarker() {
		t.Errorf("a voided payment with an amount is not a marker")
	}
}

func TestClip(t *testing.T) {
	if got := Clip("héllo", 2); got != "h" {
		t.Errorf("Clip = %q, want %q (no half character)", got, "h")
	}
	if got := Clip("abc", 5); got != "abc" {
		t.Errorf("Clip = %q", got)
	}
}

func TestKeys(t *testing.T) {
	if got := ChargeKey(42); got != "charge-42" {
		t.Errorf("ChargeKey(42) = %q, want charge-42", got)
	}
	if got := RefundKey(42); got != "refund-42" {
		t.Errorf("RefundKey(42) = %q, want refund-42", got)
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
