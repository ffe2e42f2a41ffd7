package sagatest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
// first time a test process asks.
//
// They are built into one folder per checkout under the temporary
// directory, shared by the suite's test processes: go build links a binary
// again only when what it is built from changed, so the packages after the
// first find them up to date (linking the four again cost each package
// about 8 s of CPU). A lock file keeps two processes from building at once;
// a new binary replaces the old by a rename, so a process still running
// the old one is not disturbed.
func Binary(t testing.TB, name string) string {
	t.Helper()
	if _, ok := packages[name]; !ok {
		t.Fatalf("sagatest: no service binary %q (order, inventory, payment, psp)", name)
	}
	buildOnce.Do(func() { binDir, buildErr = build() })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, filepath.Base(packages[name]))
}

func build() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(os.TempDir(), "ordersaga-sagatest-"+hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", dir, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	// One go build for the four: it links them side by side, each named
	// after its package's folder.
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, pkg := range packages {
		args = append(args, pkg)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return dir, nil
}

// moduleRoot is the folder of the go.mod above the working directory, which
// go test sets to the folder of the package under test. Not the source
// path of this file: scripts/test.sh builds with -trimpath, which leaves
// only the import path there.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("sagatest: no go.mod above %s", dir)
		}
	}
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
