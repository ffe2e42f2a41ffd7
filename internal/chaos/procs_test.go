package chaos

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/stack"
)

// TestStackFileFindsEveryInstance reads a stack.json as cmd/supervisor writes
// it: the pid of each instance is the process itself, which must still run
// the instance's executable.
func TestStackFileFindsEveryInstance(t *testing.T) {
	if _, err := os.Stat("/proc/self/exe"); err != nil {
		t.Skip("needs Linux /proc")
	}
	dir := t.TempDir()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	exe, err := filepath.EvalSymlinks(sleep)
	if err != nil {
		t.Fatal(err)
	}
	var procs []stack.Process
	pids := map[string]int{}
	for _, p := range []struct {
		name, svc string
		k, port   int
	}{{"order", "order", 1, 8081}, {"payment-fake", "payment-fake", 1, 8083}, {"payment-fake-2", "payment-fake", 2, 8183}} {
		cmd := exec.Command(exe, "30")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		procs = append(procs, stack.Process{Name: p.name, Service: p.svc, Instance: p.k, PID: cmd.Process.Pid,
			URL: "http://127.0.0.1:" + strconv.Itoa(p.port), Exe: exe})
		pids[p.name] = cmd.Process.Pid
	}
	// inventory's pid runs another program now: not ours.
	procs = append(procs, stack.Process{Name: "inventory", Service: "inventory", Instance: 1, PID: os.Getpid(),
		URL: "http://127.0.0.1:8082", Exe: exe})
	if err := stack.Write(dir, stack.File{Processes: procs}); err != nil {
		t.Fatal(err)
	}
	sf := StackFile{Dir: dir}
	for target, want := range map[string]int{"order": pids["order"], "payment": pids["payment-fake"], "payment-2": pids["payment-fake-2"]} {
		if got, err := sf.PID(target); err != nil || got != want {
			t.Errorf("PID(%s) = %d, %v; want %d", target, got, err, want)
		}
	}
	for _, target := range []string{"inventory", "order-2", "shipping"} {
		if pid, err := sf.PID(target); err == nil {
			t.Errorf("PID(%s) = %d: want an error", target, pid)
		}
	}
	urls, err := sf.URLs()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"order": "http://127.0.0.1:8081", "inventory": "http://127.0.0.1:8082",
		"payment": "http://127.0.0.1:8083", "payment-2": "http://127.0.0.1:8183"}
	if !maps.Equal(urls, want) {
		t.Errorf("URLs = %v, want %v", urls, want)
	}
	if got := instancesOf(urls, "payment"); !slices.Equal(got, []string{"payment", "payment-2"}) {
		t.Errorf("instances of payment: %v", got)
	}
	if _, err := (StackFile{Dir: t.TempDir()}).PID("order"); err == nil {
		t.Error("no stack.json: want an error")
	}
}

// With two instances and a cluster, kill and stop take turns on every
// instance, broker-restart on every node, and node-kill goes, in turn, for
// the leader of a retry tier with a retry in flight and for the leader of
// the busiest queue.
func TestPlanTargetsInstancesAndNodes(t *testing.T) {
	load := Load{Rate: 10, Duration: 40 * time.Second, WaveSize: 6, WaveSupply: 2}
	instances := []string{"order", "inventory", "payment", "order-2", "inventory-2", "payment-2"}
	nodes := []string{"n1", "n2", "n3"}
	sched := FaultSchedule{Kinds: []FaultKind{FaultKill, FaultStop, FaultBrokerRestart, FaultNodeKill}, Every: time.Second,
		Instances: instances, Nodes: nodes}
	p := NewPlan(3, load, sched)
	hit := map[string]bool{}
	for _, f := range p.Faults {
		switch f.Kind {
		case FaultKill, FaultStop:
			if !slices.Contains(instances, f.Target) {
				t.Errorf("%s on %q: not an instance", f.Kind, f.Target)
			}
		case FaultBrokerRestart:
			if !slices.Contains(nodes, f.Target) {
				t.Errorf("broker-restart on %q: not a node", f.Target)
			}
		case FaultNodeKill:
			if f.Target != "leader" && f.Target != "retry:inventory" {
				t.Errorf("node-kill on %q, want the leader of a retry tier or of the busiest queue", f.Target)
			}
		}
		hit[f.Target] = true
	}
	for _, want := range append(slices.Concat(instances, nodes), "leader", "retry:inventory") {
		if !hit[want] {
			t.Errorf("no fault on %s in %d faults", want, len(p.Faults))
		}
	}
}

// The suite's chaos run (cmd/chaos, TestChaosRun) takes every kind of
// FaultKinds in its 20 s, one every 2.2 s.
func TestPlanIsSeededAndCoversEveryFaultKind(t *testing.T) {
	load := Load{Rate: 10, Duration: 20 * time.Second, WaveSize: 6, WaveSupply: 2}
	sched := FaultSchedule{Kinds: FaultKinds, Every: 2200 * time.Millisecond}
	a, b := NewPlan(7, load, sched), NewPlan(7, load, sched)
	if len(a.Requests) != len(b.Requests) || len(a.Faults) != len(b.Faults) {
		t.Fatal("the same seed drew two plans")
	}
	for i := range a.Faults {
		if a.Faults[i] != b.Faults[i] {
			t.Fatalf("fault %d: %v vs %v", i, a.Faults[i], b.Faults[i])
		}
	}
	kinds := map[FaultKind]int{}
	for _, f := range a.Faults {
		kinds[f.Kind]++
		if f.At > load.Duration-time.Second {
			t.Errorf("fault %v starts in the load's last second", f)
		}
	}
	for _, k := range FaultKinds {
		if kinds[k] == 0 {
			t.Errorf("no %s fault in a 20 s plan with a fault every 2.2 s: %v", k, a.Faults)
		}
	}
	byKind := map[Kind]int{}
	for _, r := range a.Requests {
		byKind[r.Kind]++
	}
	for _, k := range Kinds {
		if byKind[k] == 0 {
			t.Errorf("no %s request in 200: %v", k, byKind)
		}
	}
	if byKind[KindScarce] != load.WaveSize {
		t.Errorf("%d scarce requests, want one wave of %d", byKind[KindScarce], load.WaveSize)
	}
	if c := NewPlan(8, load, sched); len(c.Faults) > 0 && c.Faults[0] == a.Faults[0] && c.Requests[0].Kind == a.Requests[0].Kind &&
		c.Requests[1].Kind == a.Requests[1].Kind && c.Requests[2].Kind == a.Requests[2].Kind {
		t.Error("seeds 7 and 8 drew the same start")
	}
}

func TestParseFaultKinds(t *testing.T) {
	if got, err := ParseFaultKinds("all", false); err != nil || !slices.Equal(got, slices.Concat(FaultKinds, SlowFaultKinds)) {
		t.Errorf("all: %v %v", got, err)
	}
	if got, err := ParseFaultKinds("all", true); err != nil || !slices.Equal(got, AllFaultKinds()) || !slices.Contains(got, FaultNodeKill) {
		t.Errorf("all on a cluster: %v %v", got, err)
	}
	if got, err := ParseFaultKinds("none", true); err != nil || len(got) != 0 {
		t.Errorf("none: %v %v", got, err)
	}
	if got, err := ParseFaultKinds("kill, db-lock,kill,node-kill", false); err != nil || len(got) != 3 {
		t.Errorf("kill, db-lock,kill,node-kill: %v %v", got, err)
	}
	if _, err := ParseFaultKinds("kill,meteor", false); err == nil {
		t.Error("meteor: want an error")
	}
}

// A database outage lasts a minute or more: one per run, however long,
// and the last.
func TestPlanHasOneOutageAtMost(t *testing.T) {
	load := Load{Rate: 10, Duration: 10 * time.Minute, WaveSize: 6, WaveSupply: 2}
	p := NewPlan(5, load, FaultSchedule{Kinds: []FaultKind{FaultKill, FaultDBOutage}, Every: 6 * time.Second})
	outages := 0
	for _, f := range p.Faults {
		if f.Kind == FaultDBOutage {
			outages++
			if f.Target != "payment" || f.Hold != outageCap {
				t.Errorf("outage %v: want payment's, held until a give-up or %s", f, outageCap)
			}
		}
	}
	if outages != 1 || len(p.Faults) < 50 {
		t.Errorf("%d outages in %d faults over 10 minutes, want one among the kills", outages, len(p.Faults))
	}
	// Last, so that no fault waits behind it until the load is over.
	if last := p.Faults[len(p.Faults)-1]; last.Kind != FaultDBOutage {
		t.Errorf("the last fault is %v, want the outage", last)
	}
	for i := 1; i < len(p.Faults); i++ {
		if p.Faults[i].At < p.Faults[i-1].At {
			t.Errorf("fault %d at %s before fault %d at %s", i, p.Faults[i].At, i-1, p.Faults[i-1].At)
		}
	}
}
