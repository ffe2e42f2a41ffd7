package chaos

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestRunDirFindsTheServiceUnderItsSupervisor builds scripts/up.sh's
// layout: .run/order.pid holds a shell's pid (the supervisor), whose child
// runs bin/order. The signal must go to the child.
func TestRunDirFindsTheServiceUnderItsSupervisor(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("needs Linux /proc")
	}
	dir := t.TempDir()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "order") // a service binary named like bin/order
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	sup := exec.Command("bash", "-c", bin+" 30 & wait")
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sup.Process.Kill(); _ = sup.Wait() })
	if err := os.WriteFile(filepath.Join(dir, "order.pid"), []byte(strconv.Itoa(sup.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var child int
	deadline := time.Now().Add(5 * time.Second)
	for child == 0 && time.Now().Before(deadline) {
		if kids := children(sup.Process.Pid); len(kids) > 0 {
			child = kids[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() {
		if p, err := os.FindProcess(child); err == nil {
			_ = p.Kill()
		}
	})
	got, err := RunDir{Dir: dir}.PID("order")
	if err != nil {
		t.Fatal(err)
	}
	if got != child || got == sup.Process.Pid {
		t.Fatalf("PID(order) = %d, want the service %d, not the supervisor %d", got, child, sup.Process.Pid)
	}
	if _, err := (RunDir{Dir: dir}).PID("inventory"); err == nil {
		t.Error("PID(inventory) without a pid file: want an error")
	}
}

func TestPlanIsSeededAndCoversEveryFaultKind(t *testing.T) {
	load := Load{Rate: 10, Duration: 20 * time.Second, WaveSize: 6, WaveSupply: 2}
	sched := FaultSchedule{Kinds: FaultKinds, Every: 2500 * time.Millisecond}
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
			t.Errorf("no %s fault in a 20 s plan with a fault every 2.5 s: %v", k, a.Faults)
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
	if got, err := ParseFaultKinds("all"); err != nil || len(got) != len(FaultKinds) {
		t.Errorf("all: %v %v", got, err)
	}
	if got, err := ParseFaultKinds("none"); err != nil || len(got) != 0 {
		t.Errorf("none: %v %v", got, err)
	}
	if got, err := ParseFaultKinds("kill, db-lock,kill"); err != nil || len(got) != 2 {
		t.Errorf("kill, db-lock,kill: %v %v", got, err)
	}
	if _, err := ParseFaultKinds("kill,meteor"); err == nil {
		t.Error("meteor: want an error")
	}
}
