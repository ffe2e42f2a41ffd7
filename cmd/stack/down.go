package main

import (
	"errors"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"

	"github.com/relmsg/ordersaga/internal/stack"
)

// down stops what up started: it asks the supervisor to stop (SIGTERM),
// then stops any process of .run/stack.json still running (a supervisor
// that was killed could not).
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
	if isOurs(f.Supervisor) {
		con.say("stopping the stack (supervisor pid %d)", f.Supervisor.PID)
		_ = syscall.Kill(f.Supervisor.PID, syscall.SIGTERM)
		// It gives the services UP_STOP_TIMEOUT, then kills them.
		if !waitGone(f.Supervisor, cfg.stopTimeout+5*time.Second) {
			con.say("the supervisor did not stop: SIGKILL")
			_ = syscall.Kill(f.Supervisor.PID, syscall.SIGKILL)
			waitGone(f.Supervisor, 5*time.Second)
		}
	}
	var left []stack.Process
	var names []string
	for _, p := range f.Processes {
		if isOurs(p) {
			left = append(left, p)
			names = append(names, p.Name)
		}
	}
	if len(left) > 0 {
		con.say("stopping %s, which the supervisor left running", strings.Join(names, " "))
		for _, p := range left {
			_ = syscall.Kill(p.PID, syscall.SIGTERM)
		}
		deadline := time.Now().Add(cfg.stopTimeout)
		for _, p := range left {
			if !waitGone(p, time.Until(deadline)) {
				con.say("%s did not stop within %s: SIGKILL", p.Name, cfg.stopTimeout)
				_ = syscall.Kill(p.PID, syscall.SIGKILL)
			}
		}
	}
	for _, p := range append(f.Processes, f.Supervisor) {
		os.Remove(p.PIDFile)
	}
	os.Remove(stack.Path(cfg.runDir))
	con.say("stopped")
}

// isOurs: the process p names is still running its executable (a pid can
// be reused; a zombie has no executable).
func isOurs(p stack.Process) bool {
	if p.PID <= 0 {
		return false
	}
	proc, err := procfs.NewProc(p.PID)
	if err != nil {
		return false
	}
	exe, err := proc.Executable()
	return err == nil && strings.TrimSuffix(exe, " (deleted)") == p.Exe
}

// waitGone waits up to d for p to end.
func waitGone(p stack.Process, d time.Duration) bool {
	for deadline := time.Now().Add(d); isOurs(p); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}
