// Package experiments runs the chapter's eight fault experiments
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

// run starts a stack, runs one scenario and fails the test unless every
// check held. The log shows the before/after tables.
func run(t *testing.T, name string, wrong bool) *lab.Report {
	t.Helper()
	sc, ok := lab.Find(name)
	if !ok {
		t.Fatalf("no scenario %q", name)
	}
	s := sagatest.Start(t,
		// A short lease so lease expiry and recovery happen within seconds (long
		// enough for the lab to arm its second pause under a loaded -race run).
		sagatest.WithEnv("order", "OUTBOX_LEASE", "3s"),
	)
	l := lab.New(sagatest.NewTarget(t, s), "", nil)
	l.Patience = 60 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep := l.Run(ctx, sc, wrong)
	var b strings.Builder
	rep.Print(&b)
	t.Log(b.String())
	if !rep.Passed() {
		t.Fatalf("%s (wrong way: %v) failed:\n  %s", name, wrong, strings.Join(rep.Failures(), "\n  "))
	}
	return rep
}

func TestExperimentAtomicCommit(t *testing.T) {
	t.Parallel()
	run(t, "atomic-commit", false)
}

func TestExperimentAtomicCommitWrongWay(t *testing.T) {
	t.Parallel()
	run(t, "atomic-commit", true)
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
