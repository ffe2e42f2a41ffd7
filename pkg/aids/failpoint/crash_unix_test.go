//go:build unix

package failpoint_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
)

const crashHelperEnv = "FAILPOINT_CRASH_HELPER"

// TestCrashHelper is the child of TestCrashKillsTheProcess; on its own it skips.
func TestCrashHelper(t *testing.T) {
	if os.Getenv(crashHelperEnv) != "1" {
		t.Skip("runs only as the child process of TestCrashKillsTheProcess")
	}
	r := failpoint.NewRegistry()
	r.Crash(mark)
	ctx := failpoint.WithRegistry(context.Background(), r)
	defer fmt.Println("deferred function ran")
	fmt.Println("before inject")
	_ = failpoint.Inject(ctx, mark)
	fmt.Println("after inject")
}

func TestCrashKillsTheProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), crashHelperEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		// CommandContext kills with SIGKILL too; don't mistake that for the crash.
		t.Fatalf("child still running after 30s; stdout:\n%s", stdout.String())
	}

	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		t.Fatalf("child: got err %v, want it killed by SIGKILL; stdout:\n%s", err, stdout.String())
	}
	ws, ok := exitErr.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child: got %v, want signal: killed; stdout:\n%s", exitErr.ProcessState, stdout.String())
	}

	out := stdout.String()
	if !strings.Contains(out, "before inject") {
		t.Fatalf("child stdout: got %q, want the line printed before Inject (did the helper run?)", out)
	}
	for _, never := range []string{"after inject", "deferred function ran", "PASS"} {
		if strings.Contains(out, never) {
			t.Errorf("child stdout: got %q, want no %q after a SIGKILL", out, never)
		}
	}
	if want := "failpoint " + mark + ": crashing"; !strings.Contains(stderr.String(), want) {
		t.Errorf("child stderr: got %q, want it to contain %q", stderr.String(), want)
	}
}
