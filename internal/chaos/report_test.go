package chaos

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestReportOfTheSample(t *testing.T) {
	r := &Report{Seed: 3, Tag: "t", Faults: []FaultRecord{{Fault: Fault{Kind: FaultKill, Target: "order"}}, {Fault: Fault{Kind: FaultPSP}, Error: "no demo mode"}}}
	r.summarize(SampleSnapshot())
	if !r.Passed() {
		t.Fatalf("violations in the sample: %v", r.Violations)
	}
	if got := r.Outcomes[KindScarce]; got[statusConfirmed] != 1 || got[statusRejected] != 1 {
		t.Errorf("scarce outcomes %v, want one confirmed and one rejected", got)
	}
	if r.FaultsByKind[FaultKill] != 1 || r.FaultsByKind[FaultPSP] != 0 {
		t.Errorf("faults by kind %v: a fault that was not injected does not count", r.FaultsByKind)
	}
	if r.TimeToTerminal.N != len(SampleSnapshot().Requests) {
		t.Errorf("time to terminal over %d orders, want every one", r.TimeToTerminal.N)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if v, ok := back["violations"].([]any); !ok || len(v) != 0 {
		t.Errorf("JSON violations = %v, want an empty list", back["violations"])
	}
	if c, ok := back["checks"].([]any); !ok || len(c) != len(Checks) {
		t.Errorf("JSON checks = %v, want %d rows", back["checks"], len(Checks))
	}
	var out strings.Builder
	r.Print(&out)
	if !strings.Contains(out.String(), "PASS: every check holds") {
		t.Errorf("text report without the verdict:\n%s", out.String())
	}
}

func TestReportListsViolations(t *testing.T) {
	s := copySnapshot(SampleSnapshot())
	o := s.Orders["5"]
	o.Payment.Status = "pending"
	o.Charges = []Charge{}
	s.Orders["5"] = o
	r := &Report{Seed: 9}
	r.summarize(s)
	if r.Passed() || r.PaymentsPending != 1 {
		t.Fatalf("passed %v, payments pending %d: want a violation and one pending payment", r.Passed(), r.PaymentsPending)
	}
	var out strings.Builder
	r.Print(&out)
	for _, want := range []string{"leftovers/payment-pending  order 5", "FAIL: 1 violations (seed 9)", "payments still pending: 1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestSubjectsSortNumerically(t *testing.T) {
	if compareSubjects("order 9", "order 10") >= 0 || compareSubjects("order 10", "order 9") <= 0 {
		t.Error("order 9 must come before order 10")
	}
	if compareSubjects("SKU-1", "SKU-2") >= 0 {
		t.Error("SKU-1 before SKU-2")
	}
}
