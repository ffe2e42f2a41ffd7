package chaostest

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Supervisor runs a service binary and starts it again whenever it dies by
// itself, as cmd/supervisor does under scripts/up.sh: the test harness's
// supervisor, so that a SIGKILL fault is followed by a restart.
type Supervisor struct {
	Path  string        // the binary
	Env   []string      // its whole environment
	Log   io.Writer     // stdout and stderr of every run
	Delay time.Duration // pause before a restart

	mu       sync.Mutex
	cmd      *exec.Cmd
	restarts int
	stopping bool
	done     chan struct{}
}

// Start runs the binary and the restart loop.
func (s *Supervisor) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.startLocked(); err != nil {
		return err
	}
	s.done = make(chan struct{})
	go s.loop()
	return nil
}

func (s *Supervisor) startLocked() error {
	cmd := exec.Command(s.Path)
	cmd.Env = s.Env
	cmd.Stdout, cmd.Stderr = s.Log, s.Log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.Path, err)
	}
	s.cmd = cmd
	return nil
}

func (s *Supervisor) loop() {
	defer close(s.done)
	for {
		s.mu.Lock()
		cmd := s.cmd
		s.mu.Unlock()
		err := cmd.Wait()
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return
		}
		fmt.Fprintf(s.Log, "{\"level\":\"WARN\",\"msg\":\"supervisor: service exited (%v); restarting\"}\n", err)
		s.mu.Unlock()
		time.Sleep(s.Delay)
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return
		}
		s.restarts++
		if err := s.startLocked(); err != nil {
			fmt.Fprintf(s.Log, "{\"level\":\"ERROR\",\"msg\":\"supervisor: %v\"}\n", err)
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
}

// PID is the running process.
func (s *Supervisor) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Restarts counts the restarts after a death.
func (s *Supervisor) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

// Stop ends the loop and the service: SIGCONT (it may be frozen), SIGTERM,
// and SIGKILL if it has not exited within timeout.
func (s *Supervisor) Stop(timeout time.Duration) error {
	s.mu.Lock()
	if s.done == nil || s.stopping {
		s.mu.Unlock()
		return nil
	}
	s.stopping = true
	p := s.cmd.Process
	s.mu.Unlock()
	_ = p.Signal(syscall.SIGCONT)
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(timeout):
		_ = p.Kill()
		<-s.done
		return errors.New("no exit within the timeout after SIGTERM; killed")
	}
}

// Supervised maps each instance ("order", "order-2") to its supervisor.
type Supervised map[string]*Supervisor

// PID implements Processes.
func (m Supervised) PID(service string) (int, error) {
	s, ok := m[service]
	if !ok {
		return 0, fmt.Errorf("no service %q", service)
	}
	if pid := s.PID(); pid > 0 {
		return pid, nil
	}
	return 0, fmt.Errorf("%s is not running", service)
}
