package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/relmsg/ordersaga/internal/rabbitnode"
	"github.com/relmsg/ordersaga/internal/stack"
)

// down stops what up started: it asks the supervisor to stop (SIGTERM),
// then stops any process or broker node of .run/stack.json still running
// (a supervisor that was killed could not), each by its pid.
func down(cfg config, con *console) error {
	f, err := stack.Read(cfg.runDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		con.say("no service started by scripts/up.sh is running")
	case err != nil:
		return err
	default:
		stopStack(cfg, con, f)
	}
	for _, svc := range append(slices.Clone(stack.Services), stack.Viewer) {
		if port := strconv.Itoa(svc.Port); listening(port) {
			con.say("note: port %s is still in use by a process up.sh did not start", port)
		}
	}
	return nil
}

func stopStack(cfg config, con *console, f stack.File) {
	if stack.RunsExe(f.Supervisor.PID, f.Supervisor.Exe) {
		con.say("stopping the stack (supervisor pid %d)", f.Supervisor.PID)
		_ = syscall.Kill(f.Supervisor.PID, syscall.SIGTERM)
		// It gives the services UP_STOP_TIMEOUT, then kills them, then
		// gives the nodes as long.
		wait := 2*cfg.stopTimeout + 5*time.Second
		if !waitGone(f.Supervisor.PID, f.Supervisor.Exe, wait) {
			con.say("the supervisor did not stop: SIGKILL")
			_ = syscall.Kill(f.Supervisor.PID, syscall.SIGKILL)
			waitGone(f.Supervisor.PID, f.Supervisor.Exe, 5*time.Second)
		}
	}
	// What the supervisor left: processes first, the broker after them.
	var procs []leftover
	for _, p := range f.Processes {
		if stack.RunsExe(p.PID, p.Exe) {
			procs = append(procs, leftover{p.Name, p.PID, p.Exe})
		}
	}
	stopLeftovers(cfg, con, procs)
	stopNodesLeft(cfg, con, f.Nodes)
	for _, p := range append(f.Processes, f.Supervisor) {
		os.Remove(p.PIDFile)
	}
	os.Remove(stack.Path(cfg.runDir))
	con.say("stopped")
}

// leftover is a process the supervisor did not stop.
type leftover struct {
	name string
	pid  int
	exe  string
}

// stopLeftovers sends SIGTERM to each, and SIGKILL to those still running
// after UP_STOP_TIMEOUT.
func stopLeftovers(cfg config, con *console, left []leftover) {
	if len(left) == 0 {
		return
	}
	var names []string
	for _, p := range left {
		names = append(names, p.name)
		_ = syscall.Kill(p.pid, syscall.SIGTERM)
	}
	con.say("stopping %s, which the supervisor left running", strings.Join(names, ", "))
	deadline := time.Now().Add(cfg.stopTimeout)
	for _, p := range left {
		if !waitGone(p.pid, p.exe, time.Until(deadline)) {
			con.say("%s did not stop within %s: SIGKILL", p.name, cfg.stopTimeout)
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
}

// stopNodesLeft stops the broker nodes of stack.json that still run, by
// their pids (rabbitnode: SIGTERM, SIGKILL after UP_STOP_TIMEOUT).
func stopNodesLeft(cfg config, con *console, nodes []stack.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.stopTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, sn := range nodes {
		name, _, _ := strings.Cut(sn.Name, "@")
		n, err := rabbitnode.Attach(rabbitnode.Config{Name: name, Port: sn.Port, DistPort: sn.DistPort, Dir: sn.Dir})
		if err != nil || !n.Alive() {
			continue
		}
		con.say("stopping RabbitMQ node %s (pid %d), which the supervisor left running", n.Name(), n.PID())
		wg.Go(func() {
			if err := n.Stop(ctx); err != nil {
				con.say("%v", err)
			}
		})
	}
	wg.Wait()
}

// waitGone waits up to d for pid to end.
func waitGone(pid int, exe string, d time.Duration) bool {
	for deadline := time.Now().Add(d); stack.RunsExe(pid, exe); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}
