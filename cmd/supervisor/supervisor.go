package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/relmsg/ordersaga/internal/stack"
)

// supervisor runs the processes of the table, and the broker nodes of a
// local cluster, and keeps them running.
type supervisor struct {
	cfg     config
	con     *console
	procs   []*proc
	nodes   []*nodeProc   // -rabbit-cluster: started before the processes, stopped after them
	self    stack.Process // the supervisor's own entry in stack.json
	started time.Time

	mu       sync.Mutex // guards stopping and the procs' changing fields
	stopping bool
	stop     chan struct{} // closed when stopping begins
}

// proc is one row of the table and the process that runs it now.
type proc struct {
	stack.Process
	ready   string // the path that answers 200 once it is ready ("/readyz")
	env     []string
	cmd     *exec.Cmd
	running bool
	exits   int           // how many times it has exited
	last    string        // how it last exited
	done    chan struct{} // closed once it has exited for good
}

// table is the processes the stack runs: every instance of each service
// (the first instances, then the second ones, ...), then, in demo mode,
// the viewer. The PSP comes first, one process however many instances:
// the payment instances call it.
func table(cfg config) []*proc {
	var procs []*proc
	add := func(name, svc string, k int, url string, own map[string]string) {
		env := map[string]string{}
		for _, kv := range os.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		maps.Copy(env, own)
		var list []string
		for _, k := range slices.Sorted(maps.Keys(env)) {
			list = append(list, k+"="+env[k])
		}
		procs = append(procs, &proc{
			ready: "/readyz",
			Process: stack.Process{
				Name: name, Service: svc, Instance: k, URL: url,
				Exe:     filepath.Join(cfg.root, "bin", svc),
				Log:     filepath.Join(cfg.runDir, name+".log"),
				PIDFile: filepath.Join(cfg.runDir, name+".pid"),
			},
			env:  list,
			done: make(chan struct{}),
		})
	}
	// -tracing: Jaeger first, then every process sends it its spans.
	traced := func(env map[string]string) map[string]string {
		if cfg.tracing {
			env["OTEL_EXPORTER_OTLP_ENDPOINT"] = stack.OTLPEndpoint()
		}
		return env
	}
	if cfg.tracing {
		add(stack.Jaeger.Name, stack.Jaeger.Name, 1, stack.Jaeger.URL(), nil)
		procs[len(procs)-1].ready = "/api/services" // its query API
	}
	add(stack.PSP.Name, stack.PSP.Name, 1, stack.PSP.URL(), traced(stack.PSPEnv(cfg.getenv, cfg.httpHost)))
	for k := 1; k <= cfg.instances; k++ {
		for _, svc := range stack.Services {
			in := svc.InstanceOf(k, cfg.instances)
			add(in.Name(), svc.Name, k, in.URL(), traced(in.Env(cfg.getenv, cfg.httpHost, cfg.brokers())))
		}
	}
	if stack.DemoMode(cfg.getenv) {
		env := stack.ViewerEnv(cfg.getenv, cfg.httpHost, cfg.brokers())
		if cfg.tracing {
			env["JAEGER_URL"] = stack.Jaeger.URL() // each order's trace, from its query API
		}
		add(stack.Viewer.Name, stack.Viewer.Name, 1, stack.Viewer.URL(), env)
	}
	return procs
}

// newSupervisor supervises procs; log is where its own output goes ("" for
// the terminal).
func newSupervisor(cfg config, con *console, log string, procs []*proc) (*supervisor, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.runDir, 0o755); err != nil {
		return nil, err
	}
	s := &supervisor{cfg: cfg, con: con, procs: procs, started: time.Now(), stop: make(chan struct{})}
	s.self = stack.Process{Name: "supervisor", PID: os.Getpid(), Exe: exe, Log: log,
		PIDFile: filepath.Join(cfg.runDir, "stack.pid")}
	return s, nil
}

// startAll starts every process (the previous run's logs kept as .log.1)
// and writes the pid files and stack.json.
func (s *supervisor) startAll() error {
	if err := writePID(s.self.PIDFile, s.self.PID); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, p := range s.procs {
		err := os.Rename(p.Log, p.Log+".1")
		if err == nil || errors.Is(err, os.ErrNotExist) {
			err = s.start(p)
		}
		if err != nil {
			for _, q := range s.procs[i:] {
				close(q.done) // never started
			}
			return err
		}
		go s.keep(p)
	}
	return s.writeStackLocked()
}

// start starts p's process with its output appended to its log (s.mu held).
func (s *supervisor) start(p *proc) error {
	log, err := os.OpenFile(p.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close() // the process has its own copy
	cmd := exec.Command(p.Exe)
	cmd.Dir, cmd.Env = s.cfg.root, p.env
	cmd.Stdout, cmd.Stderr = log, log
	// Its own session: Ctrl-C in the terminal reaches only the supervisor,
	// which stops every process in order, and a closed terminal does not
	// stop a detached stack.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	p.cmd, p.PID, p.running = cmd, cmd.Process.Pid, true
	return writePID(p.PIDFile, p.PID)
}

// keep waits for p's process and starts it again, after a second, when it
// dies by itself.
func (s *supervisor) keep(p *proc) {
	defer close(p.done)
	for {
		s.mu.Lock()
		cmd := p.cmd
		s.mu.Unlock()
		_ = cmd.Wait() // the exit status is in ProcessState
		s.mu.Lock()
		p.running, p.exits, p.last = false, p.exits+1, cmd.ProcessState.String()
		stopping := s.stopping
		s.mu.Unlock()
		if stopping {
			return
		}
		s.con.say("%s exited by itself (%s); starting it again in 1s", p.Name, p.last)
		appendLine(p.Log, fmt.Sprintf(`{"level":"WARN","msg":"supervisor: service exited (%s); restarting in 1s"}`, p.last))
		select {
		case <-s.stop:
			return
		case <-time.After(time.Second):
		}
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return
		}
		err := s.start(p)
		if err == nil {
			p.Restarts++
			err = s.writeStackLocked()
		}
		s.mu.Unlock()
		if err != nil {
			s.con.say("%s: %v", p.Name, err)
			if !p.running {
				return
			}
		}
	}
}

// writeStackLocked replaces .run/stack.json (s.mu held).
func (s *supervisor) writeStackLocked() error {
	f := stack.File{Supervisor: s.self, StartedAt: s.started}
	if stack.DemoMode(s.cfg.getenv) {
		f.ViewerURL = stack.ViewerURL(s.cfg.getenv)
	}
	for _, p := range s.procs {
		f.Processes = append(f.Processes, p.Process)
	}
	for _, p := range s.nodes {
		f.Nodes = append(f.Nodes, p.Node)
	}
	return stack.Write(s.cfg.runDir, f)
}

// waitReady returns once every process answers 200 on /readyz; it fails
// when one exits first or the wait passes UP_READY_TIMEOUT.
func (s *supervisor) waitReady(ctx context.Context) error {
	start := time.Now()
	client := &http.Client{Timeout: 2 * time.Second}
	pending := s.procs
	nextNote := 5 * time.Second
	for {
		var still []*proc
		var codes []string
		for _, p := range pending {
			s.mu.Lock()
			exits, last := p.exits, p.last
			s.mu.Unlock()
			if exits > 0 {
				s.con.say("%s exited (%s) before it was ready", p.Name, last)
				s.con.tail(p.Log)
				return errors.New("the services did not become ready")
			}
			code := readyz(ctx, client, p.URL+p.ready)
			if code == http.StatusOK {
				s.con.say("%s is ready (%s)", p.Name, time.Since(start).Round(time.Second))
				continue
			}
			still = append(still, p)
			codes = append(codes, fmt.Sprintf("%s:%03d", p.Name, code))
		}
		if len(still) == 0 {
			return nil
		}
		pending = still
		waited := time.Since(start)
		if waited >= s.cfg.readyTimeout {
			s.con.say("not ready after %s (/readyz status): %s", s.cfg.readyTimeout, strings.Join(codes, " "))
			for _, p := range pending {
				s.con.tail(p.Log)
			}
			return errors.New("the services did not become ready")
		}
		if waited >= nextNote {
			s.con.say("waiting for /readyz: %s (%s/%s)", strings.Join(codes, " "), waited.Round(time.Second), s.cfg.readyTimeout)
			nextNote += 5 * time.Second
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// readyz is the HTTP status of url (a process's /readyz; 0 when nothing
// answers).
func readyz(ctx context.Context, client *http.Client, url string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// stopAll stops every process: SIGTERM to all, SIGKILL to those still
// running after UP_STOP_TIMEOUT; then the broker nodes the same way; then
// it removes the pid files and stack.json.
func (s *supervisor) stopAll() {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	s.stopping = true
	close(s.stop)
	var names []string
	for i := len(s.procs) - 1; i >= 0; i-- {
		if p := s.procs[i]; p.running {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			names = append(names, p.Name)
		}
	}
	s.mu.Unlock()
	if len(names) > 0 {
		s.con.say("stopping %s (SIGKILL after %s)", strings.Join(names, " "), s.cfg.stopTimeout)
	}
	timer := time.NewTimer(s.cfg.stopTimeout)
	defer timer.Stop()
	expired := false
	for _, p := range s.procs {
		s.mu.Lock()
		started := p.cmd != nil
		s.mu.Unlock()
		if !started { // the cluster failed before the processes started
			continue
		}
		if !expired {
			select {
			case <-p.done:
				continue
			case <-timer.C:
				expired = true
			}
		}
		select {
		case <-p.done:
			continue
		default:
		}
		s.con.say("%s did not stop within %s: SIGKILL", p.Name, s.cfg.stopTimeout)
		s.mu.Lock()
		_ = p.cmd.Process.Kill()
		s.mu.Unlock()
		<-p.done
	}
	s.stopNodes()
	for _, p := range s.procs {
		os.Remove(p.PIDFile)
	}
	os.Remove(stack.Path(s.cfg.runDir))
	os.Remove(s.self.PIDFile)
	if len(names) > 0 || len(s.nodes) > 0 {
		s.con.say("stopped")
	}
}

func writePID(path string, pid int) error {
	return os.WriteFile(path, []byte(strconv.Itoa(pid)+"\n"), 0o644)
}

func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}
