package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FaultKind is one kind of fault the run injects.
type FaultKind string

// The fault kinds.
const (
	FaultKill          FaultKind = "kill"           // SIGKILL a service's process; its supervisor starts it again
	FaultStop          FaultKind = "stop"           // SIGSTOP a service's process, SIGCONT after the hold
	FaultBrokerClose   FaultKind = "broker-close"   // the broker closes the stack's connections
	FaultBrokerRestart FaultKind = "broker-restart" // the broker application stops, and starts again after the hold
	FaultDBKill        FaultKind = "db-kill"        // KILL every database session of a service
	FaultDBLock        FaultKind = "db-lock"        // FLUSH TABLES ... WITH READ LOCK, held for the hold, then UNLOCK TABLES
	FaultPSP           FaultKind = "psp"            // the fake PSP loses answers, fails or is slow for a few calls
)

// FaultKinds lists every kind, in report order.
var FaultKinds = []FaultKind{FaultKill, FaultStop, FaultBrokerClose, FaultBrokerRestart, FaultDBKill, FaultDBLock, FaultPSP}

// ParseFaultKinds reads "kill,stop,db-lock" ("all": every kind, "none":
// no faults).
func ParseFaultKinds(s string) ([]FaultKind, error) {
	switch strings.TrimSpace(s) {
	case "all":
		return slices.Clone(FaultKinds), nil
	case "", "none":
		return nil, nil
	}
	var out []FaultKind
	for _, part := range strings.Split(s, ",") {
		k := FaultKind(strings.TrimSpace(part))
		if !slices.Contains(FaultKinds, k) {
			return nil, fmt.Errorf("unknown fault kind %q (want some of %v, or all, or none)", k, FaultKinds)
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out, nil
}

// Services are the three services, as the load and the faults name them.
var Services = []string{"order", "inventory", "payment"}

// pspModes are the fake PSP's fault switches a psp fault sets.
var pspModes = []string{"lose-response", "error-5xx", "fail-before-charge", "slow"}

// FaultSchedule says which faults a run injects and how often.
type FaultSchedule struct {
	Kinds []FaultKind
	Every time.Duration // one fault per Every of the load, kinds in turn
}

// Fault is one planned fault.
type Fault struct {
	At     time.Duration `json:"at_ns"` // planned start, from the start of the run
	Kind   FaultKind     `json:"kind"`
	Target string        `json:"target"`            // the service, or the PSP's mode
	Hold   time.Duration `json:"hold_ns,omitempty"` // stop, broker-restart, db-lock: how long it lasts
	Count  int           `json:"count,omitempty"`   // psp: how many calls it affects
}

func (f Fault) String() string {
	s := fmt.Sprintf("%s %s", f.Kind, f.Target)
	if f.Hold > 0 {
		s += " for " + round(f.Hold).String()
	}
	if f.Count > 0 {
		s += fmt.Sprintf(" x%d", f.Count)
	}
	return strings.TrimSpace(s)
}

// draw spreads the faults over the load: one per Every, starting after a
// short lead, each kind in turn (a fresh shuffle per round), targets and
// holds drawn from rng. Each one starts a second before the load ends at
// the latest; the runner may push it later (see Run).
func (fs FaultSchedule) draw(rng *rand.Rand, d time.Duration) []Fault {
	if len(fs.Kinds) == 0 || fs.Every <= 0 {
		return nil
	}
	lead := min(3*time.Second, d/10)
	var out []Fault
	var turn []FaultKind
	svcTurn := rng.IntN(len(Services))
	for at := lead; ; at += fs.Every {
		if len(turn) == 0 {
			turn = slices.Clone(fs.Kinds)
			rng.Shuffle(len(turn), func(i, j int) { turn[i], turn[j] = turn[j], turn[i] })
		}
		f := Fault{Kind: turn[0], At: at + time.Duration(rng.Int64N(int64(fs.Every/4)+1))}
		switch f.Kind {
		case FaultKill, FaultStop, FaultDBKill:
			f.Target = Services[svcTurn%len(Services)]
			svcTurn++
		case FaultDBLock, FaultBrokerRestart:
			f.Target = "all"
		case FaultBrokerClose:
			f.Target = "stack"
		case FaultPSP:
			f.Target = pspModes[rng.IntN(len(pspModes))]
			f.Count = 1 + rng.IntN(3)
		}
		switch f.Kind {
		case FaultStop, FaultBrokerRestart:
			f.Hold = time.Duration(1000+rng.IntN(2000)) * time.Millisecond
		case FaultDBLock:
			f.Hold = time.Duration(1000+rng.IntN(1000)) * time.Millisecond
		}
		if f.At > d-time.Second {
			break
		}
		turn = turn[1:]
		out = append(out, f)
	}
	return out
}

// Processes finds the process of each service, for signals. Today it reads
// scripts/up.sh's .run/<service>.pid (RunDir); the test harness has its own
// supervisor (Supervisor); a stack description file can replace both.
type Processes interface {
	// PID returns the process of the service ("order", "inventory",
	// "payment") now: after a restart it is a new one.
	PID(service string) (int, error)
}

// Broker is what the run may do to the stack's broker.
type Broker interface {
	// CloseConnections makes the broker close the stack's connections; it
	// returns how many it closed.
	CloseConnections(ctx context.Context) (int, error)
	// StopApp stops the broker application; StartApp starts it again and
	// returns once it accepts connections. Refused on a broker the run does
	// not own (see OwnedBroker, SystemBroker).
	StopApp(ctx context.Context) error
	StartApp(ctx context.Context) error
}

// Database is what the run may do to the database server.
type Database interface {
	// KillSessions kills every session of the service's database user or
	// schema; it returns how many.
	KillSessions(ctx context.Context, service string) (int, error)
	// ReadLock holds a read lock on the stack's tables (or the whole
	// server) for hold, and says what it locked.
	ReadLock(ctx context.Context, hold time.Duration) (detail string, err error)
}

// FaultRecord is a fault as it happened.
type FaultRecord struct {
	Fault
	Started time.Duration `json:"started_ns"`      // from the start of the run
	Took    time.Duration `json:"took_ns"`         // until the fault was over (the service back, the lock released)
	Detail  string        `json:"detail"`          // what it did: pids, sessions, connections
	Error   string        `json:"error,omitempty"` // it could not be injected
}

// injector carries out faults against a stack.
type injector struct {
	obs    *observer
	procs  Processes
	broker Broker
	db     Database
	start  time.Time
	// zone is held while a fault is in progress; the scarce waves book
	// their supply only outside it.
	zone *sync.Mutex

	mu      sync.Mutex
	stopped map[int]bool // pids we SIGSTOPped and not yet continued
	locked  bool         // broker app stopped
	psp     bool         // the PSP's switch was set
}

// run injects the planned faults in order, each at its time or as soon as
// the previous one is over and every service is ready again (a fault on a
// stack still reconnecting from the last one would cut nothing), until ctx
// ends; records are returned in order.
func (in *injector) run(ctx context.Context, faults []Fault) []FaultRecord {
	var out []FaultRecord
	for _, f := range faults {
		if wait := time.Until(in.start.Add(f.At)); wait > 0 {
			select {
			case <-ctx.Done():
				return out
			case <-time.After(wait):
			}
		}
		notReady := in.obs.waitReady(ctx, 30*time.Second)
		if ctx.Err() != nil {
			return out
		}
		in.zone.Lock()
		rec := FaultRecord{Fault: f, Started: time.Since(in.start)}
		began := time.Now()
		detail, err := in.inject(ctx, f)
		rec.Took, rec.Detail = time.Since(began), detail
		if notReady != nil {
			rec.Detail += " (injected on a stack " + notReady.Error() + ")"
		}
		in.zone.Unlock()
		if err != nil {
			rec.Error = err.Error()
		}
		out = append(out, rec)
	}
	return out
}

func (in *injector) inject(ctx context.Context, f Fault) (string, error) {
	switch f.Kind {
	case FaultKill:
		return in.kill(ctx, f.Target)
	case FaultStop:
		return in.stop(ctx, f.Target, f.Hold)
	case FaultBrokerClose:
		n, err := in.broker.CloseConnections(ctx)
		return fmt.Sprintf("%d connections closed", n), err
	case FaultBrokerRestart:
		return in.brokerRestart(ctx, f.Hold)
	case FaultDBKill:
		n, err := in.db.KillSessions(ctx, f.Target)
		return fmt.Sprintf("%d sessions killed", n), err
	case FaultDBLock:
		return in.db.ReadLock(ctx, f.Hold)
	case FaultPSP:
		in.mu.Lock()
		in.psp = true
		in.mu.Unlock()
		sw := map[string]any{"mode": f.Target, "count": f.Count}
		if f.Target == "slow" {
			sw["delay_ms"] = 1500
		}
		code, _, err := in.obs.lab.Do(ctx, "payment", http.MethodPut, "/psp/switches", nil, sw, nil)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("PUT /psp/switches answered %d (is DEMO_MODE on?)", code)
		}
		return fmt.Sprintf("PSP switch %s for %d calls", f.Target, f.Count), err
	}
	return "", fmt.Errorf("unknown fault kind %q", f.Kind)
}

// kill sends SIGKILL and waits until a new process serves (its supervisor
// restarts it).
func (in *injector) kill(ctx context.Context, svc string) (string, error) {
	pid, err := in.procs.PID(svc)
	if err != nil {
		return "", err
	}
	before, _ := in.obs.startedAt(ctx, svc)
	in.obs.sampleMetrics(ctx) // what the process counted dies with it
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return "", fmt.Errorf("SIGKILL %s (pid %d): %w", svc, pid, err)
	}
	err = in.obs.waitRestarted(ctx, svc, before, 60*time.Second)
	now, _ := in.procs.PID(svc)
	return fmt.Sprintf("SIGKILL pid %d, serving again as pid %d", pid, now), err
}

// stop freezes the process for hold. SIGCONT is sent even when ctx ends
// meanwhile: a frozen service must never outlive the run.
func (in *injector) stop(ctx context.Context, svc string, hold time.Duration) (string, error) {
	pid, err := in.procs.PID(svc)
	if err != nil {
		return "", err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return "", fmt.Errorf("SIGSTOP %s (pid %d): %w", svc, pid, err)
	}
	in.mu.Lock()
	in.stopped[pid] = true
	in.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-time.After(hold):
	}
	return fmt.Sprintf("SIGSTOP pid %d, SIGCONT after %s", pid, round(hold)), in.cont(pid)
}

func (in *injector) cont(pid int) error {
	in.mu.Lock()
	delete(in.stopped, pid)
	in.mu.Unlock()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGCONT pid %d: %w", pid, err)
	}
	return nil
}

func (in *injector) brokerRestart(ctx context.Context, hold time.Duration) (string, error) {
	in.mu.Lock()
	in.locked = true
	in.mu.Unlock()
	if err := in.broker.StopApp(ctx); err != nil {
		return "", err
	}
	select {
	case <-ctx.Done():
	case <-time.After(hold):
	}
	err := in.broker.StartApp(context.WithoutCancel(ctx))
	if err == nil {
		in.mu.Lock()
		in.locked = false
		in.mu.Unlock()
	}
	return fmt.Sprintf("broker app stopped for %s, started again", round(hold)), err
}

// heal undoes whatever a fault interrupted by the end of the run left
// behind: frozen processes, a stopped broker, the PSP's switch. The read
// lock and the killed sessions need nothing: the lock is released by
// ReadLock itself, sessions reconnect.
func (in *injector) heal(ctx context.Context) error {
	var errs []error
	in.mu.Lock()
	pids := make([]int, 0, len(in.stopped))
	for pid := range in.stopped {
		pids = append(pids, pid)
	}
	locked, psp := in.locked, in.psp
	in.mu.Unlock()
	for _, pid := range pids {
		errs = append(errs, in.cont(pid))
	}
	if locked {
		errs = append(errs, in.broker.StartApp(ctx))
	}
	if psp {
		code, _, err := in.obs.lab.Do(ctx, "payment", http.MethodPut, "/psp/switches", nil, map[string]any{"mode": "normal"}, nil)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("PUT /psp/switches normal answered %d", code)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
