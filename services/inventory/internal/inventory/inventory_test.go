package inventory

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// Every (status, trigger) pair: the legal moves go where the saga says, and
// nothing else moves a reservation. Terminal statuses accept nothing.
func TestTransitionTable(t *testing.T) {
	want := map[Status]map[Trigger]Status{
		NoReservation: {Reserve: Reserved, Reject: Rejected, Cancel: CancelledBeforeReserve, CancelSold: CancelledBeforeReserve},
		// A cancel after the confirm that overtook the confirm: the sale
		// and its return, so restocked, and the late confirm finds it closed.
		Reserved:  {Confirm: Committed, Cancel: Released, CancelSold: Restocked, Expire: Expired},
		Committed: {Cancel: Restocked, CancelSold: Restocked},
		// The late payment: take the stock again or fail; a cancel finds
		// nothing to release but closes the reservation, so that a confirm
		// overtaken by its cancel cannot take stock afterwards.
		Expired: {Confirm: Committed, ConfirmShort: CommitFailed, Cancel: Released, CancelSold: Restocked},
	}
	if len(Statuses) != 9 || len(Triggers) != 7 {
		t.Fatalf("%d statuses and %d triggers: a new one needs its row and column in want", len(Statuses), len(Triggers))
	}
	for _, s := range Statuses {
		for _, tr := range Triggers {
			got, ok := Next(s, tr)
			wantTo, wantOK := want[s][tr]
			if ok != wantOK || got != wantTo {
				t.Errorf("Next(%q, %s) = (%q, %v), want (%q, %v)", s, tr, got, ok, wantTo, wantOK)
			}
			if s.Terminal() && ok {
				t.Errorf("terminal status %s accepted %s", s, tr)
			}
			if ok && got == NoReservation {
				t.Errorf("Next(%q, %s) leads back to no reservation", s, tr)
			}
		}
	}
}

// An existing reservation never accepts another create: the order id is
// the idempotency key of the reserve step.
func TestCreateOnlyFromNoReservation(t *testing.T) {
	for _, s := range Statuses {
		for _, tr := range []Trigger{Reserve, Reject} {
			if _, ok := Next(s, tr); ok != (s == NoReservation) {
				t.Errorf("Next(%q, %s) legal = %v, want %v", s, tr, ok, s == NoReservation)
			}
		}
	}
}

// Every legal move has the stock effect the saga needs, and nothing else
// touches stock.
func TestEffects(t *testing.T) {
	want := map[[2]Status]StockEffect{
		{NoReservation, Reserved}: EffectHold,
		{Reserved, Committed}:     EffectCommit,
		{Reserved, Released}:      EffectRelease,
		{Reserved, Expired}:       EffectRelease,
		{Reserved, Restocked}:     EffectRelease, // sold and returned: on_hand unchanged
		{Committed, Restocked}:    EffectRestock,
		{Expired, Committed}:      EffectTake,
	}
	for _, from := range Statuses {
		for _, to := range Statuses {
			if got := Effect(from, to); got != want[[2]Status{from, to}] {
				t.Errorf("Effect(%q, %q) = %q, want %q", from, to, got, want[[2]Status{from, to}])
			}
		}
	}
	// The legal moves that touch no stock, and why.
	none := map[[2]Status]string{
		{NoReservation, Rejected}:               "all or none: nothing was held",
		{NoReservation, CancelledBeforeReserve}: "null compensation: nothing was held",
		{Expired, CommitFailed}:                 "the late take failed: nothing taken",
		{Expired, Released}:                     "the expiry already released it",
		{Expired, Restocked}:                    "the expiry released it and the late confirm never took it",
	}
	for _, s := range Statuses {
		for _, tr := range Triggers {
			to, ok := Next(s, tr)
			if !ok {
				continue
			}
			_, isNone := none[[2]Status{s, to}]
			if isNone && Effect(s, to) != EffectNone {
				t.Errorf("%q -%s-> %q must touch no stock (%s)", s, tr, to, none[[2]Status{s, to}])
			}
			if !isNone && Effect(s, to) == EffectNone {
				t.Errorf("%q -%s-> %q has no stock effect", s, tr, to)
			}
		}
	}
}

// Every status the stock of an order can be in is reachable, and each
// ends somewhere terminal or waits for a named trigger.
func TestEveryStatusIsReachable(t *testing.T) {
	seen := map[Status]bool{NoReservation: true}
	for changed := true; changed; {
		changed = false
		for s := range seen {
			for _, tr := range Triggers {
				if to, ok := Next(s, tr); ok && !seen[to] {
					seen[to], changed = true, true
				}
			}
		}
	}
	for _, s := range Statuses {
		if !seen[s] {
			t.Errorf("status %q cannot be reached from no reservation", s)
		}
	}
}

func TestTerminal(t *testing.T) {
	want := map[Status]bool{Rejected: true, Released: true, Restocked: true, CancelledBeforeReserve: true, CommitFailed: true}
	for _, s := range Statuses {
		if s.Terminal() != want[s] {
			t.Errorf("%q.Terminal() = %v, want %v", s, s.Terminal(), want[s])
		}
		// A status that is not terminal must wait for something.
		accepts := false
		for _, tr := range Triggers {
			_, ok := Next(s, tr)
			accepts = accepts || ok
		}
		if !s.Terminal() && !accepts {
			t.Errorf("%q is not terminal but accepts no trigger", s)
		}
	}
}

func TestStatusesFitTheColumn(t *testing.T) {
	for _, s := range Statuses {
		if len(s) > 32 {
			t.Errorf("status %s is longer than reservations.status (32)", s)
		}
	}
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name  string
		lines []Line
		want  []Line
		err   string // substring; "" for valid
	}{
		{"sorted by sku", []Line{{"SKU-3", 1}, {"SKU-1", 2}, {"SKU-LIMITED", 1}, {"SKU-2", 5}},
			[]Line{{"SKU-1", 2}, {"SKU-2", 5}, {"SKU-3", 1}, {"SKU-LIMITED", 1}}, ""},
		{"one line", []Line{{"A", 1}}, []Line{{"A", 1}}, ""},
		{"empty", nil, nil, "at least one"},
		{"zero quantity", []Line{{"A", 0}}, nil, "positive"},
		{"negative quantity", []Line{{"A", -2}}, nil, "positive"},
		{"bad sku", []Line{{"A B", 1}}, nil, "bad sku"},
		{"duplicate sku", []Line{{"B", 1}, {"A", 1}, {"B", 2}}, nil, "twice"},
	}
	for _, tt := range tests {
		in := append([]Line(nil), tt.lines...)
		got, err := Plan(tt.lines)
		if tt.err != "" {
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: Plan() error = %v, want ErrInvalid mentioning %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Plan() = %v, %v; want %v", tt.name, got, err, tt.want)
		}
		if !reflect.DeepEqual(tt.lines, in) {
			t.Errorf("%s: Plan modified its input: %v", tt.name, tt.lines)
		}
	}
}

func TestShortageReason(t *testing.T) {
	tests := []struct {
		s    Shortage
		want string
	}{
		{Shortage{SKU: "SKU-LIMITED", Requested: 2, Available: 1, Known: true}, "insufficient stock for SKU-LIMITED: requested 2, available 1"},
		{Shortage{SKU: "SKU-SOLDOUT", Requested: 1, Available: 0, Known: true}, "insufficient stock for SKU-SOLDOUT: requested 1, available 0"},
		{Shortage{SKU: "SKU-NOPE", Requested: 3}, "unknown SKU SKU-NOPE: requested 3"},
	}
	for _, tt := range tests {
		if got := tt.s.Reason(); got != tt.want {
			t.Errorf("%+v.Reason() = %q, want %q", tt.s, got, tt.want)
		}
	}
}

func TestClipReason(t *testing.T) {
	if got := ClipReason("short"); got != "short" {
		t.Errorf("ClipReason(short) = %q", got)
	}
	long := strings.Repeat("é", 300)
	got := ClipReason(long)
	if n := utf8.RuneCountInString(got); n != MaxReasonLen {
		t.Errorf("ClipReason(300 runes) has %d runes, want %d", n, MaxReasonLen)
	}
	if got := ClipReason("a\xffb"); !utf8.ValidString(got) {
		t.Errorf("ClipReason kept invalid UTF-8: %q", got)
	}
}

func TestValidateReceipt(t *testing.T) {
	for _, q := range []int{1, 7, MaxReceipt} {
		if err := ValidateReceipt(q); err != nil {
			t.Errorf("ValidateReceipt(%d) = %v, want nil", q, err)
		}
	}
	for _, q := range []int{0, -1, MaxReceipt + 1} {
		if err := ValidateReceipt(q); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateReceipt(%d) = %v, want ErrInvalid", q, err)
		}
	}
}

func TestAvailable(t *testing.T) {
	if got := (Stock{OnHand: 10, Reserved: 3}).Available(); got != 7 {
		t.Errorf("Available() = %d, want 7", got)
	}
}
