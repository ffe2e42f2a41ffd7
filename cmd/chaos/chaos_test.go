package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/chaos"
	"github.com/relmsg/ordersaga/internal/chaos/chaostest"
	"github.com/relmsg/ordersaga/internal/rabbitnode"
	"github.com/relmsg/ordersaga/internal/rabbitnode/rabbitnodetest"
	"github.com/relmsg/ordersaga/internal/sagatest"
	"github.com/relmsg/ordersaga/internal/stack"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
)

// TestChaosRun is the chaos run in the suite: a private RabbitMQ node, the
// three services as real child processes (each restarted when it dies, as
// cmd/supervisor does; internal/chaos/chaostest) on fresh databases, 20 s of
// mixed load at 10 orders/s with every fault kind that takes seconds
// (chaos.FaultKinds; the database outage takes minutes and is a command of
// docs/chaos.md), then the consistency report, and the self-test's live
// read on the same stack: a wrong row planted, read and caught.
//
// CHAOS_SEED replays a seed; CHAOS_DURATION, CHAOS_RATE,
// CHAOS_FAULT_EVERY and CHAOS_FAULTS (a -faults list: "all" adds the
// outage) make it the long run of docs/chaos.md, and CHAOS_INSTANCES and
// CHAOS_NODES the cluster mode of scripts/up.sh -n 2 --rabbit-cluster 3 on
// the harness's own ports, databases and nodes ("all" then adds node-kill):
//
//	CHAOS_DURATION=90s CHAOS_RATE=40 CHAOS_FAULT_EVERY=6s go test -run TestChaosRun -v -timeout 30m ./cmd/chaos
func TestChaosRun(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: runs the whole stack under faults (run without -short)")
	}
	seed := uint64(envNumber(t, "CHAOS_SEED", 11))
	nodes := int(envNumber(t, "CHAOS_NODES", 1))
	kinds := chaos.FaultKinds
	if v := os.Getenv("CHAOS_FAULTS"); v != "" {
		var err error
		if kinds, err = chaos.ParseFaultKinds(v, nodes > 1); err != nil {
			t.Fatalf("CHAOS_FAULTS: %v", err)
		}
	}
	cfg := chaos.Config{
		Seed: seed,
		Load: chaos.Load{Rate: envNumber(t, "CHAOS_RATE", 10), Duration: envDuration(t, "CHAOS_DURATION", 20*time.Second),
			WaveSize: 6, WaveSupply: 2},
		Faults:      chaos.FaultSchedule{Kinds: kinds, Every: envDuration(t, "CHAOS_FAULT_EVERY", 2200*time.Millisecond)},
		Quiet:       3 * time.Second,
		RestTimeout: 90 * time.Second,
		Progress:    testWriter{t},
	}
	var broker []*rabbitnode.Node
	if nodes > 1 {
		broker = rabbitnodetest.Cluster(t, "chaoscl", nodes)
	} else {
		broker = []*rabbitnode.Node{rabbitnodetest.Start(t, "chaostest")}
	}
	st := chaostest.Start(t, chaostest.Options{Nodes: broker, Instances: int(envNumber(t, "CHAOS_INSTANCES", 1))})
	logs := st.Logs
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Load.Duration+10*time.Minute)
	defer cancel()
	rep, err := chaos.Run(ctx, cfg, st.Target)
	if err != nil {
		t.Fatalf("chaos run (seed %d): %v\n%s", seed, err, logs(40, ""))
	}
	var out bytes.Buffer
	rep.Print(&out)
	t.Logf("report:\n%s", out.String())

	checkEveryKindRan(t, rep, kinds)
	// Every rule is asserted (the answers a client got included: no 5xx,
	// issue 11 finding 8; no payment left pending, finding 7).
	for _, v := range rep.Violations {
		t.Errorf("violation (seed %d): %s", seed, v)
	}
	// The live read catches a wrong row in the stack's tables, and only
	// while it is there.
	checkLivePlant(ctx, t, rep)
	if t.Failed() {
		t.Logf("service logs:\n%s", logs(40, ""))
		for _, n := range broker {
			t.Logf("broker node %s, its errors and closed connections:\n%s", n.Name(), brokerTroubles(n, 40))
		}
	}
}

// brokerTroubles is the last lines of a node's log that tell of an error or
// a closed connection: why a client's channel or connection went away
// (the run's own included) is written there, not in any service's log.
func brokerTroubles(n *rabbitnode.Node, lines int) string {
	b, err := os.ReadFile(n.LogFile())
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "[error]") || strings.Contains(l, "exception") || strings.Contains(l, "closing AMQP connection") {
			out = append(out, l)
		}
	}
	return strings.Join(out[max(0, len(out)-lines):], "\n")
}

// checkEveryKindRan: the run did what it says, every fault kind was
// injected and every kind of request was sent and accepted.
func checkEveryKindRan(t *testing.T, rep *chaos.Report, kinds []chaos.FaultKind) {
	t.Helper()
	for _, k := range kinds {
		if rep.FaultsByKind[k] == 0 {
			t.Errorf("no %s fault was injected", k)
		}
	}
	for _, f := range rep.Faults {
		if f.Error != "" {
			t.Errorf("fault %s at +%s was not injected: %s", f.Fault, f.Started, f.Error)
		}
	}
	for _, k := range chaos.Kinds {
		accepted := 0
		for status, n := range rep.Outcomes[k] {
			if status != "not accepted" {
				accepted += n
			}
		}
		if accepted == 0 {
			t.Errorf("no %s order was accepted", k)
		}
	}
}

// checkLivePlant plants a wrong row into the stack the run left and checks
// that the live read catches it.
func checkLivePlant(ctx context.Context, t *testing.T, rep *chaos.Report) {
	t.Helper()
	p, err := chaos.PlantLive(ctx, rep)
	if err != nil {
		t.Errorf("live plant: %v", err)
	} else {
		var b bytes.Buffer
		chaos.PrintLivePlant(&b, p)
		t.Logf("%s", b.String())
		if !p.Caught() {
			t.Errorf("the live read did not catch the plant: %+v", p)
		}
	}
}

// TestCommandAgainstAStackOnTheSharedBroker runs the command as a user
// would against scripts/up.sh, through its flags: a stack on the machine's
// broker, where broker-close must close only this stack's connections,
// db-kill finds the sessions by schema, and the JSON report comes out on
// stdout. kill and stop need scripts/up.sh's pid files, db-lock and
// broker-restart are covered by TestChaosRun, and so is copy-take (the
// broker over AMQP that it needs is TestStackOfTheFlags's).
func TestCommandAgainstAStackOnTheSharedBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: runs a stack (run without -short)")
	}
	stack := sagatest.Start(t)
	args := []string{
		"-order-url", stack.Order.URL, "-inventory-url", stack.Inventory.URL, "-payment-url", stack.Payment.URL, "-psp-url", stack.PSP.URL,
		"-seed", "5", "-duration", "6s", "-rate", "5", "-wave-size", "3", "-wave-supply", "1",
		"-faults", "broker-close,db-kill,psp", "-fault-every", "1500ms", "-quiet", "2s", "-rest-timeout", "60s",
		"-exchange", stack.NS.Exchange(), "-mysql-root-dsn", sqldbtest.ServerDSN(),
		"-db-schemas", fmt.Sprintf("order=%s,inventory=%s,payment=%s", stack.Order.DB.Name, stack.Inventory.DB.Name, stack.Payment.DB.Name),
		"-json",
	}
	var stdout bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := run(ctx, args, func(string) string { return "" }, &stdout, testWriter{t})
	if err != nil && !errors.Is(err, errViolations) {
		t.Fatalf("run: %v", err)
	}
	var rep chaos.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("the JSON report does not decode: %v\n%s", err, stdout.String())
	}
	if (err == nil) != rep.Passed() {
		t.Errorf("exit error %v, but the report has %d violations", err, len(rep.Violations))
	}
	if rep.Seed != 5 {
		t.Errorf("report seed %d, want 5", rep.Seed)
	}
	for _, k := range []chaos.FaultKind{chaos.FaultBrokerClose, chaos.FaultDBKill, chaos.FaultPSP} {
		if rep.FaultsByKind[k] == 0 {
			t.Errorf("no %s fault was injected: %+v", k, rep.Faults)
		}
	}
	for _, f := range rep.Faults {
		if f.Kind == chaos.FaultBrokerClose && !strings.HasPrefix(f.Detail, "3 connections") && !strings.HasPrefix(f.Detail, "2 connections") &&
			!strings.HasPrefix(f.Detail, "1 connections") {
			t.Errorf("broker-close on the shared broker: %s, want this stack's 1 to 3 connections only", f.Detail)
		}
	}
	for _, v := range rep.Violations {
		t.Errorf("violation: %s", v)
	}
}

// TestStackOfTheFlags: the run acts only on a stack it can name (its
// stack.json, or URLs given), and the broker over AMQP (copy-take,
// node-kill of a retry tier's leader) is the stack's: the namespace of
// -exchange, the machine's broker at -amqp-url, or every node of the
// stack's own cluster in stack.json.
func TestStackOfTheFlags(t *testing.T) {
	dir := t.TempDir()
	noEnv := func(string) string { return "" }
	o, err := parseFlags([]string{"-run-dir", dir}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// No stack.json, no URL: whatever answers on scripts/up.sh's ports may
	// be another checkout's stack, which the faults must not touch.
	if _, _, err := o.stack(context.Background(), false); err == nil || !strings.Contains(err.Error(), "no stack of this checkout") {
		t.Errorf("no stack.json and no URL: %v, want a refusal", err)
	}
	o, err = parseFlags([]string{"-run-dir", dir, "-order-url", "http://127.0.0.1:1", "-exchange", "t-abc.saga.events",
		"-amqp-url", "amqp://u:p@10.0.0.1:5672/"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	st, closeStack, err := o.stack(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStack()
	if st.Bus.NS != "t-abc." || st.Bus.Queue("payment.psp-commands") != "t-abc.payment.psp-commands" || st.Bus.URLs != "amqp://u:p@10.0.0.1:5672/" {
		t.Errorf("bus %q %q, want the namespace t-abc. and the broker of -amqp-url", st.Bus.NS, st.Bus.URLs)
	}
	f := stack.File{Nodes: []stack.Node{{Name: "ordersaga-1@localhost", Port: 5701}, {Name: "ordersaga-2@localhost", Port: 5702}}}
	if err := stack.Write(dir, f); err != nil {
		t.Fatal(err)
	}
	o, _ = parseFlags([]string{"-run-dir", dir}, noEnv, io.Discard)
	if st, _, err = o.stack(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if want := "amqp://guest:guest@127.0.0.1:5701/,amqp://guest:guest@127.0.0.1:5702/"; st.Bus.URLs != want || st.Bus.NS != "" {
		t.Errorf("bus of a cluster: %q %q, want %q and no namespace", st.Bus.URLs, st.Bus.NS, want)
	}
	if _, ok := st.Broker.(chaos.Cluster); !ok {
		t.Errorf("broker %T, want the stack's cluster", st.Broker)
	}
}

func envNumber(t *testing.T, key string, def float64) float64 {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", key, v)
	}
	return n
}

func envDuration(t *testing.T, key string, def time.Duration) time.Duration {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", key, v)
	}
	return d
}

// testWriter sends the run's progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
