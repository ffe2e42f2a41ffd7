package sagatest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Real crashes need real processes: a failpoint armed with "crash" kills
// the process with SIGKILL, with no deferred cleanup, exactly as kill -9
// would. StartProcess runs the service's binary (built once per test run)
// with the same environment as the in-process service.

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

var packages = map[string]string{
	"order":     "./services/order",
	"inventory": "./services/inventory",
	"payment":   "./services/payment-fake",
	"psp":       "./services/payment-fake/cmd/psp",
}

// Binary returns the path of the service's binary, building all of them the
// first time it is asked.
func Binary(t testing.TB, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		binDir, buildErr = os.MkdirTemp("", "sagatest-bin-")
		if buildErr != nil {
			return
		}
		// One go build for the four: it links them side by side.
		args := []string{"build", "-o", binDir + string(filepath.Separator)}
		for _, pkg := range packages {
			args = append(args, pkg)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		// go build names a binary after its package's folder.
		for n, pkg := range packages {
			if base := filepath.Base(pkg); base != n {
				if buildErr = os.Rename(filepath.Join(binDir, base), filepath.Join(binDir, n)); buildErr != nil {
					return
				}
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, name)
}

// Process is a service running as a child process.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// StartProcess runs the service as a child process with its environment
// plus extra variables (for example FAILPOINTS), and waits until it is
// ready. Stop the in-process instance first: both would serve one port.
func (s *Service) StartProcess(extra map[string]string) *Process {
	s.t.Helper()
	cmd := exec.Command(Binary(s.t, s.Name))
	cmd.Env = append(os.Environ(), "GORACE=halt_on_error=1")
	for k, v := range s.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	for k, v := range extra {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout = s.logs
	cmd.Stderr = s.logs
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start %s process: %v", s.Name, err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	s.t.Cleanup(func() { p.Kill() })
	s.waitReady(s.Name+" process", func() bool { return true }, func() (bool, error) {
		select {
		case <-p.done:
			return true, p.err
		default:
			return false, nil
		}
	})
	return p
}

// WaitExit waits for the process to end by itself and reports whether it
// was killed by SIGKILL (a failpoint crash).
func (p *Process) WaitExit(ctx context.Context) (killed bool, err error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return true, nil
		}
	}
	return false, p.err
}

// Stop sends SIGTERM and waits for a graceful exit.
func (p *Process) Stop() error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(30 * time.Second):
		p.Kill()
		return fmt.Errorf("no exit within 30s of SIGTERM")
	}
}

// Kill ends the process with SIGKILL if it still runs.
func (p *Process) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}
