package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSampleSnapshotIsClean(t *testing.T) {
	if got := Check(SampleSnapshot()); len(got) != 0 {
		t.Fatalf("the consistent sample reports %d violations:\n%v", len(got), got)
	}
}

// TestEveryPlantedViolationIsCaught: the selftest's table, one planted
// violation per rule, each reported under its own check and rule.
func TestEveryPlantedViolationIsCaught(t *testing.T) {
	for _, p := range Plants() {
		t.Run(p.Check+"/"+p.Rule, func(t *testing.T) {
			s := copySnapshot(SampleSnapshot())
			p.Apply(&s)
			got := Check(s)
			if !slices.ContainsFunc(got, func(v Violation) bool { return v.Check == p.Check && v.Rule == p.Rule }) {
				t.Errorf("%s: not reported; got %v", p.What, got)
			}
		})
	}
}

func TestPlantsCoverEveryRule(t *testing.T) {
	planted := map[string]bool{}
	for _, p := range Plants() {
		planted[p.Check+"/"+p.Rule] = true
	}
	for _, c := range Checks {
		rules := Rules[c.Name]
		if len(rules) == 0 {
			t.Errorf("check %s has no rules", c.Name)
		}
		for _, r := range rules {
			if !planted[c.Name+"/"+r] {
				t.Errorf("no planted violation for %s/%s", c.Name, r)
			}
			delete(planted, c.Name+"/"+r)
		}
	}
	for k := range planted {
		t.Errorf("planted %s is not a listed rule", k)
	}
}

func TestSelfTestPasses(t *testing.T) {
	clean, results, ok := SelfTest()
	if !ok {
		var b strings.Builder
		PrintSelfTest(&b, clean, results, ok)
		t.Fatal(b.String())
	}
}

// TestCheckReportsEveryRuleItCanEmit: the checker emits only listed rules
// (Rules is the contract the selftest and the report rely on).
func TestCheckReportsOnlyListedRules(t *testing.T) {
	for _, p := range Plants() {
		s := copySnapshot(SampleSnapshot())
		p.Apply(&s)
		for _, v := range Check(s) {
			if !slices.Contains(Rules[v.Check], v.Rule) {
				t.Errorf("planting %s/%s reported an unlisted rule %s/%s", p.Check, p.Rule, v.Check, v.Rule)
			}
		}
	}
}

func TestExpectedOutcomes(t *testing.T) {
	tests := []struct {
		name string
		r    Request
		want []string
	}{
		{"happy", Request{Kind: KindHappy}, []string{statusConfirmed}},
		{"insufficient", Request{Kind: KindInsufficient}, []string{statusRejected}},
		{"scarce", Request{Kind: KindScarce}, []string{statusConfirmed, statusRejected}},
		{"decline", Request{Kind: KindDecline}, []string{statusCancelled}},
		{"cancel answered cancelled", Request{Kind: KindCancel, Cancels: []Answer{{Status: 0}, {Status: 202, Result: "cancelled"}}}, []string{statusCancelled}},
		{"cancel of a rejected order", Request{Kind: KindCancel, Cancels: []Answer{{Status: 200, Result: "already_rejected"}}}, []string{statusRejected}},
		{"cancel never answered", Request{Kind: KindCancel, Cancels: []Answer{{Status: 0}}}, []string{statusConfirmed, statusRejected, statusCancelled}},
		{"replay", Request{Kind: KindReplay}, []string{statusConfirmed}},
		{"conflict", Request{Kind: KindConflict}, []string{statusConfirmed}},
	}
	for _, tt := range tests {
		if got := expected(tt.r); !slices.Equal(got, tt.want) {
			t.Errorf("%s: expected %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A cancel may legitimately overtake the create: inventory then keeps a
// cancelled_before_reserve marker and payment a cancelled_before_charge one.
func TestCancelBeforeReserveIsConsistent(t *testing.T) {
	s := copySnapshot(SampleSnapshot())
	o := s.Orders["6"]
	o.Reservation = &Reservation{Status: "cancelled_before_reserve"}
	o.Payment = &Payment{Status: "cancelled_before_charge"}
	o.Charges = []Charge{}
	o.RefundStatus = "none"
	o.History = []Change{{To: statusPendingInventory, Trigger: "created", Actor: "api"},
		{From: statusPendingInventory, To: statusCancelled, Trigger: "cancel_requested", Actor: "api"}}
	s.Orders["6"] = o
	if got := Check(s); len(got) != 0 {
		t.Fatalf("a cancel before the reservation is consistent, got %v", got)
	}
}

// An order cancelled before its charge was sent closes its payment as
// withdrawn (issue 11, finding 7): consistent without a charge, a
// violation when the PSP charged anyway.
func TestWithdrawnPaymentIsConsistentWithoutACharge(t *testing.T) {
	s := copySnapshot(SampleSnapshot())
	o := s.Orders["6"]
	o.Payment = &Payment{Status: "withdrawn", AmountCents: o.TotalCents}
	o.Charges = []Charge{}
	o.RefundStatus = "none"
	s.Orders["6"] = o
	if got := Check(s); len(got) != 0 {
		t.Fatalf("a withdrawn payment without a charge is consistent, got %v", got)
	}
	o.Charges = []Charge{{ChargeID: "ch_late", Status: "succeeded", AmountCents: o.TotalCents, RefundedCents: o.TotalCents}}
	o.RefundStatus = "refunded"
	s.Orders["6"] = o
	if got := Check(s); len(got) != 1 || got[0].Rule != "payment-record" {
		t.Fatalf("a withdrawn payment with a PSP charge: got %v, want one payment-record violation", got)
	}
}

// The payment sweep may request a charge again with a new version: not a
// double effect. The same version twice is one.
func TestRepeatedChargeRequestNeedsANewVersion(t *testing.T) {
	s := copySnapshot(SampleSnapshot())
	o := s.Orders["1"]
	o.Outbox = append(o.Outbox, Event{Service: "payment", EventID: "again", Type: "payment.charge-requested", Version: 3})
	s.Orders["1"] = o
	if got := Check(s); len(got) != 0 {
		t.Fatalf("a charge requested again with a new version is legal, got %v", got)
	}
	o.Outbox = append(o.Outbox, Event{Service: "payment", EventID: "again2", Type: "payment.charge-requested", Version: 3})
	s.Orders["1"] = o
	got := Check(s)
	if len(got) != 1 || got[0].Rule != "outbox-event" {
		t.Fatalf("the same version twice: got %v, want one double-effect/outbox-event", got)
	}
}

func TestCounterFollowsRestarts(t *testing.T) {
	var c counter
	for _, v := range []float64{10, 12, 15, 2, 4, 4, 1} { // restarts after 15 and after 4
		c.observe(v)
	}
	if c.total != 5+4+1 {
		t.Fatalf("total %v, want 10 (10->15, 0->4 after a restart, 0->1 after another)", c.total)
	}
}

func TestSpread(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	s := spread(ds)
	if s.N != 100 || time.Duration(s.P50) != 51*time.Millisecond || time.Duration(s.P95) != 96*time.Millisecond || time.Duration(s.Max) != 100*time.Millisecond {
		t.Fatalf("spread %+v", s)
	}
}

// A receipt with no definite answer may or may not have been booked: the
// stock check accepts either, and nothing beyond.
func TestUncertainReceiptWidensOnlyItsOwnUnits(t *testing.T) {
	s := copySnapshot(SampleSnapshot())
	s.UncertainReceipts = map[string]int{"SKU-1": 2}
	for _, onHand := range []int{98, 99, 100} {
		s.StockEnd["SKU-1"] = Stock{OnHand: onHand, Available: onHand}
		if got := Check(s); len(got) != 0 {
			t.Errorf("on hand %d with 2 units uncertain: %v", onHand, got)
		}
	}
	for _, onHand := range []int{97, 101} {
		s.StockEnd["SKU-1"] = Stock{OnHand: onHand, Available: onHand}
		if got := Check(s); len(got) != 1 || got[0].Rule != "on-hand" {
			t.Errorf("on hand %d with 2 units uncertain: got %v, want one stock/on-hand", onHand, got)
		}
	}
}

// The faults check, case by case: what each new fault must have reached,
// and the processes (the plants of the selftest cover one case a rule).
func TestFaultsCheck(t *testing.T) {
	tests := []struct {
		name  string
		plant func(*Snapshot)
		want  string // the rule reported, "" for none
	}{
		{"the sample", func(*Snapshot) {}, ""},
		{"a second kill explains a second restart", func(s *Snapshot) {
			s.Processes["order"] = 3
			s.Faults = append(s.Faults, FaultRecord{Fault: Fault{Kind: FaultKill, Target: "order"}})
		}, ""},
		{"a kill that failed explains nothing", func(s *Snapshot) {
			plantFault(s, FaultKill, func(f *FaultRecord) { f.Error = "no pid" })
		}, "restart"},
		{"a consumer the copy-take did not reach", func(s *Snapshot) {
			plantFault(s, FaultCopyTake, func(f *FaultRecord) { f.CopyTakes = f.CopyTakes[1:] })
		}, "copy-take"},
		{"an event not applied after its copies", func(s *Snapshot) {
			plantFault(s, FaultCopyTake, func(f *FaultRecord) { f.CopyTakes[0].Applied = 0 })
		}, "copy-take"},
		{"a copy-take that failed", func(s *Snapshot) {
			plantFault(s, FaultCopyTake, func(f *FaultRecord) { f.Error = "processes changed" })
		}, "copy-take"},
		{"a retry kill with no record", func(s *Snapshot) { plantFault(s, FaultNodeKill, func(f *FaultRecord) { f.Retry = nil }) }, "retry-in-flight"},
		{"a busiest-queue kill needs no retry", func(s *Snapshot) {
			plantFault(s, FaultNodeKill, func(f *FaultRecord) { f.Target, f.Retry = "leader", nil })
		}, ""},
		{"an outage no delivery outlasted", func(s *Snapshot) {
			plantFault(s, FaultDBOutage, func(f *FaultRecord) { f.Outage.GaveUp = nil })
		}, "give-up"},
		{"a dead letter of the outage not redriven", func(s *Snapshot) {
			plantFault(s, FaultDBOutage, func(f *FaultRecord) { f.Outage.DeadLetters = 1 })
		}, "give-up"},
		{"a delivery that gave up, then a dead letter redriven and applied", func(s *Snapshot) {
			plantFault(s, FaultDBOutage, func(f *FaultRecord) { f.Outage.DeadLetters, f.Outage.Redriven = 1, 1 })
		}, ""},
	}
	for _, tt := range tests {
		s := copySnapshot(SampleSnapshot())
		tt.plant(&s)
		var got []string
		for _, v := range Check(s) {
			if v.Check == CheckFaults {
				got = append(got, v.Rule)
			}
		}
		switch {
		case tt.want == "" && len(got) > 0:
			t.Errorf("%s: got %v, want no faults violation", tt.name, got)
		case tt.want != "" && !slices.Contains(got, tt.want):
			t.Errorf("%s: got %v, want faults/%s", tt.name, got, tt.want)
		}
	}
}
