package rabbitnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// The node's process: its pid, whether it still runs, and stopping it;
// and the free ports a new node may take.

// PID is the Erlang VM's process id: the one this handle started, or,
// once that one has ended, the one the node's pid file names (another
// handle or the stack's supervisor started the node again).
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pid != 0 && !Running(n.pid) {
		if p := n.pidFromFile(); p != 0 && Running(p) {
			n.pid = p
		}
	}
	return n.pid
}

func (n *Node) setPID(pid int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pid = pid
}

// Alive reports whether the node's VM is running: its pid runs, and (on
// Linux) its command line names this node's HOME, so that a pid the system
// has given to another process since does not count.
func (n *Node) Alive() bool {
	pid := n.PID()
	if !Running(pid) {
		return false
	}
	proc, err := procfs.NewProc(pid)
	if err != nil {
		return true // not Linux: the pid is all we have
	}
	args, err := proc.CmdLine()
	if err != nil {
		return true
	}
	return slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, n.path("home")) })
}

// Executable is the program the node's VM runs (beam.smp), as /proc shows
// it: a pid that no longer runs it is not the node ("" when unknown).
func (n *Node) Executable() string {
	proc, err := procfs.NewProc(n.PID())
	if err != nil {
		return ""
	}
	exe, err := proc.Executable()
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(exe, " (deleted)")
}

// Stop ends the node by its pid: SIGTERM (the VM shuts down cleanly), and
// SIGKILL if it still runs after 30 s or when ctx ends first.
func (n *Node) Stop(ctx context.Context) error {
	if !n.Alive() {
		return nil
	}
	pid := n.PID()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("rabbitnode %s: SIGTERM %d: %w", n.name, pid, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for Running(pid) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			for range 50 {
				if !Running(pid) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			return fmt.Errorf("rabbitnode %s: no exit after SIGTERM; killed", n.name)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// FreePort returns a port in 5710-5999 that is free now, with its
// distribution port (+20000) free too: away from the system broker (5672,
// 25672) and from a cluster on 5701-5703. Another process may still take it
// before the node binds it; Start then fails with the node's log.
func FreePort() (int, error) {
	start := 5710 + int(time.Now().UnixNano()%290)
	for i := range 290 {
		p := 5710 + (start-5710+i)%290
		if portFree(p) && portFree(p+20000) {
			return p, nil
		}
	}
	return 0, errors.New("rabbitnode: no free port in 5710-5999")
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// Running reports whether pid exists and is not a zombie. The detached VM
// is not our child, so there is no Wait to learn that it ended (and a VM
// that ended may linger as a zombie until init reaps it).
func Running(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	proc, err := procfs.NewProc(pid)
	if err != nil {
		return true // not Linux: kill -0 is all we have
	}
	st, err := proc.Stat()
	return err != nil || st.State != "Z"
}
