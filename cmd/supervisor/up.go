package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/relmsg/ordersaga/internal/stack"
)

// upForeground supervises in this process, copying the services' logs to
// the terminal until Ctrl-C.
func upForeground(cfg config, con *console, quiet bool) error {
	if err := checkPorts(cfg, con); err != nil {
		return err
	}
	ctx, stop := signalContext(con)
	defer stop()
	s, err := newSupervisor(cfg, con, "", table(cfg))
	if err != nil {
		return err
	}
	err = s.startCluster(ctx)
	if err == nil {
		err = s.startAll()
	}
	followCtx, stopFollowing := context.WithCancel(context.Background())
	var followers sync.WaitGroup
	if err == nil && !quiet {
		for _, p := range s.procs {
			followers.Go(func() { con.follow(followCtx, p.Log, fmt.Sprintf("%-15s", "["+p.Name+"]"), con.stdout) })
		}
	}
	if err == nil {
		con.say("started %s; waiting for /readyz (up to %s)", names(s.procs), cfg.readyTimeout)
		err = s.waitReady(ctx)
	}
	if err == nil {
		con.say("all ready in %s", time.Since(s.started).Round(100*time.Millisecond))
		con.banner(cfg)
		con.print(con.stdout, "  Ctrl-C stops them all.\n")
		if quiet {
			con.print(con.stdout, "  Logs: .run/<service>.log\n")
		}
		<-ctx.Done()
	}
	s.stopAll()
	stopFollowing()
	followers.Wait()
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("%w; stopped them", err)
	}
	return nil
}

// upDetached starts the supervisor as a process of its own (stack
// supervise, in its own session, its output in .run/stack.log), shows its
// progress until it reports ready on the pipe it gets as fd 3, and returns.
func upDetached(cfg config, con *console) error {
	if err := checkPorts(cfg, con); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.runDir, 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(cfg.runDir, "stack.log")
	if err := os.Rename(logPath, logPath+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, "supervise", "-n", strconv.Itoa(cfg.instances), "-rabbit-cluster", strconv.Itoa(cfg.clusterSize),
		"-tracing="+strconv.FormatBool(cfg.tracing))
	cmd.Dir = cfg.root
	cmd.Env = os.Environ()
	for k, v := range cfg.made {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.ExtraFiles = []*os.File{readyW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	readyW.Close()
	log.Close()
	if err != nil {
		return err
	}

	followCtx, stopFollowing := context.WithCancel(context.Background())
	var follower sync.WaitGroup
	follower.Go(func() { con.follow(followCtx, logPath, "", con.stderr) })
	readyc := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(readyR).ReadString('\n')
		readyc <- line == "ready\n"
	}()
	ctx, stop := signalContext(con)
	defer stop()
	var ready bool
	select {
	case ready = <-readyc:
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGTERM)
		ready = <-readyc // false: the pipe closes when the supervisor exits
	}
	if !ready {
		_ = cmd.Wait()
	}
	stopFollowing()
	follower.Wait()
	switch {
	case ready:
		con.banner(cfg)
		con.print(con.stdout, "  Running in the background; stop with: scripts/up.sh down\n")
		return cmd.Process.Release()
	case ctx.Err() != nil:
		return nil
	}
	return errors.New("the stack did not start (its log: .run/stack.log)")
}

// superviseDetached is the supervisor that upDetached starts: it writes
// "ready" to fd 3 once every service is ready, then runs until SIGTERM
// (stack down).
func superviseDetached(cfg config, con *console) error {
	ready := os.NewFile(3, "ready")
	ctx, stop := signalContext(con)
	defer stop()
	s, err := newSupervisor(cfg, con, filepath.Join(cfg.runDir, "stack.log"), table(cfg))
	if err != nil {
		return err
	}
	if err := s.startCluster(ctx); err != nil {
		s.stopAll()
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if err := s.startAll(); err != nil {
		s.stopAll()
		return err
	}
	con.say("started %s; waiting for /readyz (up to %s)", names(s.procs), cfg.readyTimeout)
	if err := s.waitReady(ctx); err != nil {
		s.stopAll()
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("%w; stopped them", err)
	}
	con.say("all ready in %s", time.Since(s.started).Round(100*time.Millisecond))
	fmt.Fprintln(ready, "ready")
	ready.Close()
	<-ctx.Done()
	s.stopAll()
	return nil
}

// signalContext ends on SIGINT (Ctrl-C), SIGTERM or SIGHUP. Later signals
// are ignored while the stack stops.
func signalContext(con *console) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		select {
		case s := <-sig:
			con.say("%v: stopping the services", s)
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel() }
}

// checkPorts fails when something listens on a port of the table or of
// the cluster's nodes: up never reuses a running service (it could be an
// old build) nor a node it did not start.
func checkPorts(cfg config, con *console) error {
	f, _ := stack.Read(cfg.runDir)
	busy := false
	for _, want := range table(cfg) {
		u, err := url.Parse(want.URL)
		if err != nil || !listening(u.Port()) {
			continue
		}
		busy = true
		if p, ok := find(f, want.Name); ok && stack.RunsExe(p.PID, p.Exe) {
			con.say("%s is already running on :%s (pid %d, started by scripts/up.sh)", want.Name, u.Port(), p.PID)
		} else {
			con.say("port %s (%s) is in use by another process (see: ss -ltnp 'sport = :%s')", u.Port(), want.Name, u.Port())
		}
	}
	for _, n := range cfg.nodeConfigs() {
		for _, port := range []int{n.Port, n.Port + 20000} {
			if p := strconv.Itoa(port); listening(p) {
				busy = true
				con.say("port %s (RabbitMQ node %s) is in use (see: ss -ltnp 'sport = :%s')", p, n.Name, p)
			}
		}
	}
	if busy {
		return errors.New("not starting over running services: stop them first (scripts/up.sh down)")
	}
	return nil
}

func listening(port string) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", port), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func find(f stack.File, name string) (stack.Process, bool) {
	for _, p := range f.Processes {
		if p.Name == name {
			return p, true
		}
	}
	return stack.Process{}, false
}

func names(procs []*proc) string {
	var out []string
	for _, p := range procs {
		out = append(out, p.Name)
	}
	return strings.Join(out, " ")
}
