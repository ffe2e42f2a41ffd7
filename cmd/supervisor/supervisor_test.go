package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/dotenv"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/internal/rabbitnode"
	"github.com/relmsg/ordersaga/internal/stack"
	"github.com/relmsg/ordersaga/internal/testutil"
)

// testSupervisor supervises two stand-in services (shell scripts that log a
// line and wait) in a temporary directory.
func testSupervisor(t *testing.T) (*supervisor, config) {
	t.Helper()
	root := t.TempDir()
	cfg := config{root: root, runDir: filepath.Join(root, ".run"), stopTimeout: 5 * time.Second, getenv: os.Getenv}
	script := filepath.Join(root, "service")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"started as $NAME\"\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var procs []*proc
	for _, name := range []string{"alpha", "beta"} {
		procs = append(procs, &proc{
			Process: stack.Process{Name: name, Service: name, Instance: 1, Exe: script,
				Log: filepath.Join(cfg.runDir, name+".log"), PIDFile: filepath.Join(cfg.runDir, name+".pid")},
			env:  []string{"NAME=" + name, "PATH=" + os.Getenv("PATH")},
			done: make(chan struct{}),
		})
	}
	s, err := newSupervisor(cfg, newConsole(io.Discard, io.Discard), "", procs)
	if err != nil {
		t.Fatal(err)
	}
	return s, cfg
}

// waitLog waits until the log at path holds n lines that contain line.
func waitLog(t *testing.T, path, line string, n int) string {
	t.Helper()
	var b []byte
	defer func() {
		if t.Failed() {
			t.Logf("%s:\n%s", path, b)
		}
	}()
	testutil.WaitFor(t, 10*time.Second, fmt.Sprintf("%d× %q in %s", n, line, path), func() bool {
		b, _ = os.ReadFile(path)
		return strings.Count(string(b), line) >= n
	})
	return string(b)
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// A process that dies by itself is started again, and the pid file and
// stack.json follow it; stopping ends every process and removes the files.
func TestSupervisorRestartsAndStops(t *testing.T) {
	s, cfg := testSupervisor(t)
	if err := os.WriteFile(filepath.Join(cfg.runDir, "alpha.log"), []byte("previous run\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.startAll(); err != nil {
		t.Fatal(err)
	}
	defer s.stopAll()
	f, err := stack.Read(cfg.runDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Processes) != 2 || f.Supervisor.PID != os.Getpid() {
		t.Fatalf("stack.json = %+v, want alpha and beta under this process", f)
	}
	alpha := f.Processes[0]
	if pid := readPID(t, alpha.PIDFile); pid != alpha.PID || pid <= 0 {
		t.Fatalf("alpha.pid = %d, stack.json says %d", pid, alpha.PID)
	}
	if b, _ := os.ReadFile(filepath.Join(cfg.runDir, "alpha.log.1")); string(b) != "previous run\n" {
		t.Errorf("alpha.log.1 = %q, want the previous run's log", b)
	}

	waitLog(t, alpha.Log, "started as alpha", 1)
	if err := syscall.Kill(alpha.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var again stack.Process
	testutil.WaitFor(t, 10*time.Second, "alpha to be started again", func() bool {
		f, err := stack.Read(cfg.runDir)
		if err != nil || f.Processes[0].Restarts != 1 {
			return false
		}
		again = f.Processes[0]
		return true
	})
	if again.PID == alpha.PID || readPID(t, alpha.PIDFile) != again.PID {
		t.Errorf("after the restart: pid %d (was %d), alpha.pid %d", again.PID, alpha.PID, readPID(t, alpha.PIDFile))
	}
	if err := syscall.Kill(again.PID, 0); err != nil {
		t.Errorf("the new alpha (pid %d) is not running: %v", again.PID, err)
	}
	if log := waitLog(t, alpha.Log, "started as alpha", 2); !strings.Contains(log, "supervisor: service exited (signal: killed)") {
		t.Errorf("alpha.log has no note of the supervisor:\n%s", log)
	}

	beta := f.Processes[1]
	s.stopAll()
	for _, pid := range []int{again.PID, beta.PID} {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("pid %d still runs after stopAll", pid)
		}
	}
	for _, path := range []string{alpha.PIDFile, beta.PIDFile, stack.Path(cfg.runDir)} {
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left behind after stopAll (%v)", path, err)
		}
	}
}

// A process that ignores SIGTERM is killed once the stop timeout has passed.
func TestSupervisorKillsWhatDoesNotStop(t *testing.T) {
	s, cfg := testSupervisor(t)
	stubborn := filepath.Join(cfg.root, "stubborn")
	if err := os.WriteFile(stubborn, []byte("#!/bin/sh\ntrap '' TERM\necho up\nwhile :; do sleep 1; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s.procs[1].Exe = stubborn
	s.cfg.stopTimeout = 500 * time.Millisecond
	if err := s.startAll(); err != nil {
		t.Fatal(err)
	}
	waitLog(t, s.procs[1].Log, "up", 1) // the trap is set
	pid := s.procs[1].PID
	var said strings.Builder
	s.con = newConsole(io.Discard, &said)
	s.stopAll()
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("pid %d survived stopAll", pid)
	}
	if want := "[up] beta did not stop within 500ms: SIGKILL"; !strings.Contains(said.String(), want) {
		t.Errorf("stopAll said:\n%s\nwant the line %q", said.String(), want)
	}
}

// The table with -n 2 and a cluster: every instance under its own name,
// port, log and pid file: the one PSP first, then the first instances,
// the viewer last.
func TestTableOfInstances(t *testing.T) {
	cfg := config{root: "/r", runDir: "/r/.run", httpHost: "127.0.0.1", instances: 2, clusterSize: 3, clusterPort: 5701, nodeName: stack.NodeName,
		getenv: func(k string) string { return map[string]string{"DEMO_MODE": "true"}[k] }}
	var got []string
	for _, p := range table(cfg) {
		env := map[string]string{}
		for _, kv := range p.env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		got = append(got, fmt.Sprintf("%s %s#%d %s %s %s %s %s", p.Name, p.Service, p.Instance, p.URL,
			filepath.Base(p.Log), filepath.Base(p.PIDFile), env["INSTANCE_ID"], env["HTTP_ADDR"]))
		if p.Service != "viewer" && p.Service != "psp" && strings.Count(env["AMQP_URL"], "amqp://") != 3 {
			t.Errorf("%s AMQP_URL = %q, want the three nodes", p.Name, env["AMQP_URL"])
		}
	}
	want := []string{
		"psp psp#1 http://127.0.0.1:8084 psp.log psp.pid psp 127.0.0.1:8084",
		"order order#1 http://127.0.0.1:8081 order.log order.pid order-1 127.0.0.1:8081",
		"inventory inventory#1 http://127.0.0.1:8082 inventory.log inventory.pid inventory-1 127.0.0.1:8082",
		"payment-fake payment-fake#1 http://127.0.0.1:8083 payment-fake.log payment-fake.pid payment-fake-1 127.0.0.1:8083",
		"order-2 order#2 http://127.0.0.1:8181 order-2.log order-2.pid order-2 127.0.0.1:8181",
		"inventory-2 inventory#2 http://127.0.0.1:8182 inventory-2.log inventory-2.pid inventory-2 127.0.0.1:8182",
		"payment-fake-2 payment-fake#2 http://127.0.0.1:8183 payment-fake-2.log payment-fake-2.pid payment-fake-2 127.0.0.1:8183",
		"viewer viewer#1 http://127.0.0.1:8080 viewer.log viewer.pid  ",
	}
	if !slices.Equal(got, want) {
		t.Errorf("table:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A broker node of the stack's cluster that dies (SIGKILL) is started
// again with its data, stack.json follows its pid, the service users of
// deploy/provision.sh can log in, and stopping the stack stops the node.
func TestSupervisorRestartsAKilledNode(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts a RabbitMQ node")
	}
	example, err := dotenv.Read("../../.env.example")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range example {
		if strings.Contains(k, "_AMQP_") {
			t.Setenv(k, v)
		}
	}
	port, err := rabbitnode.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs("../..")
	runDir := t.TempDir()
	cfg := config{root: root, runDir: runDir, stopTimeout: 20 * time.Second, readyTimeout: 60 * time.Second,
		getenv: os.Getenv, instances: 1, clusterSize: 1, clusterPort: port,
		nodeName: func(k int) string { return fmt.Sprintf("svtest%d-%d", port, k) }}
	s, err := newSupervisor(cfg, newConsole(io.Discard, io.Discard), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := s.startCluster(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.stopAll()
	if err := s.startAll(); err != nil {
		t.Fatal(err)
	}
	f, err := stack.Read(runDir)
	if err != nil || len(f.Nodes) != 1 {
		t.Fatalf("stack.json: %+v, %v; want one node", f, err)
	}
	n := f.Nodes[0]
	if n.Port != port || n.PID <= 0 || !strings.HasSuffix(n.Exe, "beam.smp") || n.Dir != filepath.Join(runDir, "rabbit", cfg.nodeName(1)) {
		t.Errorf("node in stack.json: %+v", n)
	}
	if err := syscall.Kill(n.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var again stack.Node
	testutil.WaitFor(t, 90*time.Second, "the node to be started again", func() bool {
		f, err := stack.Read(runDir)
		if err != nil || f.Nodes[0].Restarts != 1 {
			return false
		}
		again = f.Nodes[0]
		return true
	})
	if again.PID == n.PID || !rabbitnode.Running(again.PID) {
		t.Errorf("after the restart: pid %d (was %d)", again.PID, n.PID)
	}
	user := url.UserPassword(example["ORDER_AMQP_USER"], example["ORDER_AMQP_PASSWORD"])
	c, err := amqp.Dial(stack.AMQPURLs(user, []string{fmt.Sprintf("127.0.0.1:%d", port)}))
	if err != nil {
		t.Fatalf("the order service's user on the restarted node: %v", err)
	}
	c.Close()

	s.stopAll()
	if rabbitnode.Running(again.PID) {
		t.Errorf("node pid %d still runs after stopAll", again.PID)
	}
	if _, err := os.Stat(stack.Path(runDir)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stack.json left behind (%v)", err)
	}
}

// The tokens the settings do not set are made at start, once: getenv
// answers them, the banner shows the viewer's URL with its token, and a
// token that is set is used as it is.
func TestTokensMadeAtStart(t *testing.T) {
	env := map[string]string{"DEMO_MODE": "true"}
	cfg, err := loadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	v, p := cfg.getenv("VIEWER_TOKEN"), cfg.getenv("PSP_TOKEN")
	if len(v) < 40 || len(p) < 40 || v == p || cfg.getenv("VIEWER_TOKEN") != v {
		t.Fatalf("made VIEWER_TOKEN %q, PSP_TOKEN %q: want two distinct random tokens, stable", v, p)
	}
	var out strings.Builder
	newConsole(&out, io.Discard).banner(cfg)
	if !strings.Contains(out.String(), "http://127.0.0.1:8080/?token="+v) {
		t.Errorf("banner does not show the viewer's URL with its token:\n%s", out.String())
	}
	if again, _ := loadConfig(func(k string) string { return env[k] }); again.getenv("VIEWER_TOKEN") == v {
		t.Errorf("a second start made the same token")
	}
	env["ADMIN_TOKEN"], env["PSP_TOKEN"] = "adm", "psp-k"
	cfg, _ = loadConfig(func(k string) string { return env[k] })
	if cfg.getenv("VIEWER_TOKEN") != "" || cfg.getenv("PSP_TOKEN") != "psp-k" || stack.ViewerToken(cfg.getenv) != "adm" {
		t.Errorf("with ADMIN_TOKEN and PSP_TOKEN set: VIEWER_TOKEN %q, PSP_TOKEN %q; want none made", cfg.getenv("VIEWER_TOKEN"), cfg.getenv("PSP_TOKEN"))
	}
}
