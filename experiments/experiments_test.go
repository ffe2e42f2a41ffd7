// Package experiments runs the chapter's fault experiments
// (docs/contract.md, "Failure experiments") on the real MariaDB and
// RabbitMQ, each against its own stack of the three services, and, where
// the mechanism has a wrong-way switch, the same scenario the wrong way to
// show the anomaly the mechanism prevents.
// The scenarios live in internal/lab and are the same ones
// scripts/experiment.sh runs against a live stack.
package experiments

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/lab"
	"github.com/relmsg/ordersaga/internal/sagatest"
)

// run starts a stack (with opts), runs one scenario and fails the test
// unless every check held. The log shows the before/after tables.
func run(t *testing.T, name string, wrong bool, opts ...sagatest.Option) *lab.Report {
	t.Helper()
	return runAfter(t, name, wrong, nil, opts...)
}

// runAfter is run with prepare called on the stack first.
func runAfter(t *testing.T, name string, wrong bool, prepare func(*sagatest.Saga), opts ...sagatest.Option) *lab.Report {
	t.Helper()
	sc, ok := lab.Find(name)
	if !ok {
		t.Fatalf("no scenario %q", name)
	}
	s := sagatest.Start(t, append([]sagatest.Option{
		// A short lease so lease expiry and recovery happen within seconds (long
		// enough for the lab to arm its second pause under a loaded -race run).
		sagatest.WithEnv("order", "OUTBOX_LEASE", "3s"),
	}, opts...)...)
	if prepare != nil {
		prepare(s)
	}
	l := lab.New(sagatest.NewTarget(t, s), "", nil)
	l.Patience = 60 * time.Second
	var steps []lab.Step
	l.Steps = func(st lab.Step) { steps = append(steps, st) }
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep := l.Run(ctx, sc, wrong)
	var b strings.Builder
	rep.Print(&b)
	t.Log(b.String())
	if !rep.Passed() {
		t.Fatalf("%s (wrong way: %v) failed:\n  %s", name, wrong, strings.Join(rep.Failures(), "\n  "))
	}
	checkSteps(t, rep, steps)
	return rep
}

// checkSteps checks that the steps reported live (the viewer's lab panel)
// tell the same story as the report: from start to verdict, every section
// and check in order, and the fault itself (a failpoint armed, or a
// duplicate published).
func checkSteps(t *testing.T, rep *lab.Report, steps []lab.Step) {
	t.Helper()
	if len(steps) < 2 || steps[0].Kind != lab.StepStarted || steps[len(steps)-1].Kind != lab.StepVerdict {
		t.Fatalf("steps do not run from started to verdict: %+v", steps)
	}
	if last := steps[len(steps)-1]; last.Passed != rep.Passed() || last.Verdict != rep.Verdict {
		t.Errorf("verdict step = %v %q, report = %v %q", last.Passed, last.Verdict, rep.Passed(), rep.Verdict)
	}
	var sections, checks int
	fault := false
	for _, st := range steps {
		switch st.Kind {
		case lab.StepSection:
			if sections < len(rep.Sections) && st.Section.Title != rep.Sections[sections].Title {
				t.Errorf("section step %d = %q, report has %q", sections, st.Section.Title, rep.Sections[sections].Title)
			}
			sections++
		case lab.StepCheck:
			if checks < len(rep.Checks) && *st.Check != rep.Checks[checks] {
				t.Errorf("check step %d = %+v, report has %+v", checks, *st.Check, rep.Checks[checks])
			}
			checks++
		case lab.StepArmed, lab.StepPublished, lab.StepBinding:
			fault = true
		}
	}
	if sections != len(rep.Sections) || checks != len(rep.Checks) || !fault {
		t.Errorf("steps: %d sections, %d checks, fault step %v; report: %d sections, %d checks",
			sections, checks, fault, len(rep.Sections), len(rep.Checks))
	}
}

func TestExperimentAtomicCommit(t *testing.T) {
	t.Parallel()
	run(t, "atomic-commit", false)
}

func TestExperimentAtomicCommitWrongWay(t *testing.T) {
	t.Parallel()
	run(t, "atomic-commit", true)
}

// A replayed Idempotency-Key fails on the unique key and uses up an order
// id, so the rolled-back order does not take last+1: the experiment still
// finds the order inventory and the PSP acted on (a reader of the viewer
// sends a key twice, then runs this).
func TestExperimentAtomicCommitWrongWayAfterAReplay(t *testing.T) {
	t.Parallel()
	run := runAfter(t, "atomic-commit", true, func(s *sagatest.Saga) {
		body := map[string]any{"customer_id": "c-replay", "items": []map[string]any{{"sku": "SKU-1", "quantity": 1}}}
		for range 2 {
			if code := s.Order.Do("POST", "/orders", map[string]string{"Idempotency-Key": "replayed"}, body, nil); code != 202 {
				t.Fatalf("create: %d", code)
			}
		}
	})
	for _, c := range run.Checks {
		if strings.HasPrefix(c.What, "anomaly: the order does not exist") && strings.Contains(c.Detail, "/orders/2 ") {
			t.Errorf("the experiment looked at order 2, the id the replay used up: %s", c.Detail)
		}
	}
}

func TestExperimentSendRecovery(t *testing.T) {
	t.Parallel()
	run(t, "send-recovery", false)
}

func TestExperimentDuplicateWindow(t *testing.T) {
	t.Parallel()
	run(t, "duplicate-window", false)
}

func TestExperimentConsumeRecovery(t *testing.T) {
	t.Parallel()
	run(t, "consume-recovery", false)
}

func TestExperimentConsumeRecoveryWrongWay(t *testing.T) {
	t.Parallel()
	run(t, "consume-recovery", true)
}

func TestExperimentAckLost(t *testing.T) {
	t.Parallel()
	run(t, "ack-lost", false)
}

func TestExperimentConcurrentDuplicate(t *testing.T) {
	t.Parallel()
	run(t, "concurrent-duplicate", false)
}

func TestExperimentConcurrentDuplicateWrongWay(t *testing.T) {
	t.Parallel()
	run(t, "concurrent-duplicate", true)
}

func TestExperimentLeaseExpiry(t *testing.T) {
	t.Parallel()
	run(t, "lease-expiry", false)
}

func TestExperimentLeaseExpiryWrongWay(t *testing.T) {
	t.Parallel()
	run(t, "lease-expiry", true)
}

func TestExperimentOutOfOrder(t *testing.T) {
	t.Parallel()
	run(t, "out-of-order", false)
}

func TestExperimentOutOfOrderWrongWay(t *testing.T) {
	t.Parallel()
	run(t, "out-of-order", true)
}

func TestExperimentClaimCrash(t *testing.T) {
	t.Parallel()
	run(t, "claim-crash", false)
}

func TestExperimentConfirmLost(t *testing.T) {
	t.Parallel()
	run(t, "confirm-lost", false)
}

// With the outbox's default limits the unroutable event is delivered at its
// next attempt once the binding is back.
func TestExperimentUnroutable(t *testing.T) {
	t.Parallel()
	rep := run(t, "unroutable", false)
	if !strings.Contains(rep.Verdict, "at its next attempt") {
		t.Errorf("the event should have been retried until the binding came back: %s", rep.Verdict)
	}
}

// With a short total deadline (OUTBOX_DEADLINE) the unroutable event fails
// at its limit, is kept as 'failed', and goes after an operator's retry.
func TestExperimentUnroutableKeptAsFailed(t *testing.T) {
	t.Parallel()
	rep := run(t, "unroutable", false, sagatest.WithEnv("order", "OUTBOX_DEADLINE", "1s"))
	if !strings.Contains(rep.Verdict, "an operator retried it") {
		t.Errorf("the event should have failed at its deadline and been retried by the operator: %s", rep.Verdict)
	}
}

func TestExperimentDedupeRecord(t *testing.T) {
	t.Parallel()
	run(t, "dedupe-record", false)
}

func TestExperimentDedupeRecordWrongWay(t *testing.T) {
	t.Parallel()
	run(t, "dedupe-record", true)
}

func TestExperimentDeltaParking(t *testing.T) {
	t.Parallel()
	run(t, "delta-parking", false)
}

// A short PARK_DEADLINE, so the overdue check alerts within seconds.
func TestExperimentDeltaOverdue(t *testing.T) {
	t.Parallel()
	run(t, "delta-overdue", false, sagatest.WithEnv("inventory", "PARK_DEADLINE", "3s"))
}

func TestExperimentCommitThenPublish(t *testing.T) {
	t.Parallel()
	run(t, "commit-then-publish", false)
}

func TestExperimentCommitThenPublishWrongWay(t *testing.T) {
	t.Parallel()
	run(t, "commit-then-publish", true)
}

func TestExperimentSyncReserve(t *testing.T) {
	t.Parallel()
	run(t, "sync-reserve", false)
}

func TestExperimentSyncReserveWrongWay(t *testing.T) {
	t.Parallel()
	run(t, "sync-reserve", true)
}
