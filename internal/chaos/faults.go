package chaos

import (
	"context"
	"errors"
	"fmt"
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
	FaultKill          FaultKind = "kill"           // SIGKILL an instance's process; its supervisor starts it again
	FaultStop          FaultKind = "stop"           // SIGSTOP an instance's process, SIGCONT after the hold
	FaultBrokerClose   FaultKind = "broker-close"   // the broker closes the stack's connections
	FaultBrokerRestart FaultKind = "broker-restart" // the broker application (of one node of a cluster) stops, and starts again after the hold
	FaultDBKill        FaultKind = "db-kill"        // KILL every database session of a service
	FaultDBLock        FaultKind = "db-lock"        // FLUSH TABLES ... WITH READ LOCK, held for the hold, then UNLOCK TABLES
	FaultPSP           FaultKind = "psp"            // the fake PSP loses answers, fails or is slow for a few calls
	FaultCopyTake      FaultKind = "copy-take"      // at every consumer, a delivery and its copy in one take (copytake.go)
	FaultDBOutage      FaultKind = "db-outage"      // a service's database account locked until deliveries exceed their retry budget (outage.go)
	FaultNodeKill      FaultKind = "node-kill"      // SIGKILL of a cluster node: the one leading a retry tier with a retry waiting, or the busiest queue's leader
)

// FaultKinds lists every kind a stack on one broker can take in seconds,
// in report order: the chaos run of the test suite takes each of them.
var FaultKinds = []FaultKind{FaultKill, FaultStop, FaultBrokerClose, FaultBrokerRestart, FaultDBKill, FaultDBLock, FaultPSP, FaultCopyTake}

// SlowFaultKinds take a minute or more each (a database outage outlasts
// the consumers' retry budget): in the command's runs, at most one of
// each per run, not in the test suite's.
var SlowFaultKinds = []FaultKind{FaultDBOutage}

// ClusterFaultKinds are the kinds only a broker of several nodes that the
// run owns can take (see Cluster).
var ClusterFaultKinds = []FaultKind{FaultNodeKill}

// AllFaultKinds lists every kind, in report order.
func AllFaultKinds() []FaultKind { return slices.Concat(FaultKinds, SlowFaultKinds, ClusterFaultKinds) }

// ParseFaultKinds reads "kill,stop,db-lock" ("all": every kind the stack
// can take, the cluster's with a cluster; "none": no faults).
func ParseFaultKinds(s string, cluster bool) ([]FaultKind, error) {
	known := AllFaultKinds()
	switch strings.TrimSpace(s) {
	case "all":
		if cluster {
			return known, nil
		}
		return slices.Concat(FaultKinds, SlowFaultKinds), nil
	case "", "none":
		return nil, nil
	}
	var out []FaultKind
	for _, part := range strings.Split(s, ",") {
		k := FaultKind(strings.TrimSpace(part))
		if !slices.Contains(known, k) {
			return nil, fmt.Errorf("unknown fault kind %q (want some of %v, or all, or none)", k, known)
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

// Processes finds the process of each instance, for signals: StackFile
// reads scripts/up.sh's .run/stack.json, the test harness has its own
// supervisor (chaostest.Supervised).
type Processes interface {
	// PID returns the process of the instance ("order", "order-2",
	// "payment") now: after a restart it is a new one.
	PID(instance string) (int, error)
}

// Broker is what the run may do to the stack's broker.
type Broker interface {
	// CloseConnections makes the broker close the stack's connections; it
	// returns how many it closed.
	CloseConnections(ctx context.Context) (int, error)
	// StopApp stops the broker application of node ("all": the broker's
	// only node); StartApp starts it again and returns once it accepts
	// connections. Refused on a broker the run does not own (see
	// OwnedBroker, SystemBroker, ClusterBroker).
	StopApp(ctx context.Context, node string) error
	StartApp(ctx context.Context, node string) error
}

// Cluster is a broker of several nodes that the run owns (ClusterBroker):
// one node can die while the others serve.
type Cluster interface {
	Broker
	// Nodes names the nodes.
	Nodes() []string
	// KillNode sends SIGKILL to a node's VM ("leader": the node leading
	// the busiest consumer queue; "leader:<queue>": the node leading that
	// queue), calls killed (if not nil) once the signal is sent, and
	// returns once the node serves again, started by the stack's
	// supervisor or by KillNode itself; the detail says which node, which
	// queue, which pids.
	KillNode(ctx context.Context, node string, killed func()) (string, error)
	// RetryLeader finds the retry tier of queue that holds the most
	// retries with at least a second left to wait (tier 2 and up), and
	// the node leading it; n is 0 when no such tier holds one.
	RetryLeader(ctx context.Context, queue string) (node, tier string, n int, err error)
	// QueueTotals is every message each quorum queue holds, by name:
	// ready, unacked, and dead-lettered not yet forwarded.
	QueueTotals(ctx context.Context) (map[string]int, error)
}

// Database is what the run may do to the database server.
type Database interface {
	// KillSessions kills every session of the service's database user or
	// schema; it returns how many.
	KillSessions(ctx context.Context, service string) (int, error)
	// ReadLock holds a read lock on the stack's tables (or the whole
	// server) for hold, and says what it locked.
	ReadLock(ctx context.Context, hold time.Duration) (detail string, err error)
	// LockAccount takes the database away from the service (its account
	// locked, its sessions killed) until unlock is called; unlock may be
	// called more than once.
	LockAccount(ctx context.Context, service string) (detail string, unlock func(context.Context) error, err error)
}

// FaultRecord is a fault as it happened.
type FaultRecord struct {
	Fault
	Started time.Duration `json:"started_ns"`      // from the start of the run
	Took    time.Duration `json:"took_ns"`         // until the fault was over (the service back, the lock released)
	Detail  string        `json:"detail"`          // what it did: pids, sessions, connections
	Error   string        `json:"error,omitempty"` // it could not be injected
	// What a fault reached, which the checks read (faults rules):
	CopyTakes []CopyTake     `json:"copy_takes,omitempty"` // copy-take: each consumer's copies
	Retry     *RetryInFlight `json:"retry,omitempty"`      // node-kill of a retry tier's leader: the retries waiting there
	Outage    *Outage        `json:"outage,omitempty"`     // db-outage: the deliveries that reached their give-up
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

	bus     *Bus        // the broker over AMQP (copy-take, node-kill of a retry tier)
	copier  *copyTaker  // copy-take
	orders  orderLister // db-outage: the run's orders, whose journals it reads
	traffic trafficFunc // extra requests while a fault waits for deliveries

	mu       sync.Mutex
	stopped  map[int]bool                  // pids we SIGSTOPped and not yet continued
	locked   string                        // the node whose broker app is stopped ("" none)
	psp      bool                          // the PSP's switch was set
	armed    map[[2]string]bool            // (service, failpoint) armed by a fault, for the heal to disarm
	accounts []func(context.Context) error // unlocks of database accounts a fault locked
}

// trafficFunc sends extra requests of the run until stop is called
// (loader.traffic): a fault that needs deliveries to act on has them even
// once the load is over.
type trafficFunc func(ctx context.Context) (stop func())

// noteArmed records a failpoint armed on svc's instances: the heal
// disarms it whatever happened to the fault.
func (in *injector) noteArmed(svc, point string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.armed == nil {
		in.armed = map[[2]string]bool{}
	}
	in.armed[[2]string{svc, point}] = true
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
		zoned := quietZone(f)
		if zoned {
			in.zone.Lock()
		}
		rec := FaultRecord{Fault: f, Started: time.Since(in.start)}
		began := time.Now()
		err := in.inject(ctx, &rec)
		rec.Took = time.Since(began)
		if notReady != nil {
			rec.Detail += " (injected on a stack " + notReady.Error() + ")"
		}
		if zoned {
			in.zone.Unlock()
		}
		if err != nil {
			rec.Error = err.Error()
		}
		out = append(out, rec)
	}
	return out
}

// quietZone reports whether the scarce waves (and the load, which waits
// for them) wait for f to end before they book their supply: every fault
// that can leave the inventory's answer to a receipt unknown, so not a
// copy-take (it holds consumers, not the HTTP answers) nor an outage of
// the payment service's database.
func quietZone(f Fault) bool {
	return f.Kind != FaultCopyTake && !(f.Kind == FaultDBOutage && f.Target == "payment")
}

// inject carries out rec's fault and fills in what it did.
func (in *injector) inject(ctx context.Context, rec *FaultRecord) error {
	f := rec.Fault
	switch f.Kind {
	case FaultCopyTake:
		if in.copier == nil {
			return errors.New("copy-take needs the stack's broker over AMQP")
		}
		takes, err := in.copier.run(ctx)
		rec.CopyTakes, rec.Detail = takes, describeCopyTakes(takes)
		if err == nil {
			rec.Detail += "; every process the same"
		}
		return err
	case FaultDBOutage:
		out, err := in.dbOutage(ctx, f.Target, f.Hold)
		rec.Outage, rec.Detail = out, out.String()
		return err
	case FaultNodeKill:
		if strings.HasPrefix(f.Target, "retry:") {
			r, detail, err := in.killRetryLeader(ctx, strings.TrimPrefix(f.Target, "retry:"))
			rec.Retry, rec.Detail = r, detail
			return err
		}
	}
	var err error
	rec.Detail, err = in.injectPlain(ctx, f)
	return err
}

// injectPlain carries out the faults whose record is their detail.
func (in *injector) injectPlain(ctx context.Context, f Fault) (string, error) {
	switch f.Kind {
	case FaultKill:
		return in.kill(ctx, f.Target)
	case FaultStop:
		return in.stop(ctx, f.Target, f.Hold)
	case FaultBrokerClose:
		n, err := in.broker.CloseConnections(ctx)
		return fmt.Sprintf("%d connections closed", n), err
	case FaultBrokerRestart:
		return in.brokerRestart(ctx, f.Target, f.Hold)
	case FaultNodeKill:
		c, ok := in.broker.(Cluster)
		if !ok {
			return "", errors.New("node-kill needs a broker of several nodes that the run owns")
		}
		return c.KillNode(ctx, f.Target, nil)
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
		code, _, err := in.obs.lab.Do(ctx, "psp", http.MethodPut, "/psp/switches", nil, sw, nil)
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

func (in *injector) brokerRestart(ctx context.Context, node string, hold time.Duration) (string, error) {
	in.mu.Lock()
	in.locked = node
	in.mu.Unlock()
	if err := in.broker.StopApp(ctx, node); err != nil {
		return "", err
	}
	select {
	case <-ctx.Done():
	case <-time.After(hold):
	}
	err := in.broker.StartApp(context.WithoutCancel(ctx), node)
	if err == nil {
		in.mu.Lock()
		in.locked = ""
		in.mu.Unlock()
	}
	what := "broker app"
	if node != "all" {
		what = "broker app of " + node
	}
	return fmt.Sprintf("%s stopped for %s, started again", what, round(hold)), err
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
	in.mu.Lock()
	armed, accounts := in.armed, in.accounts
	in.armed, in.accounts = nil, nil
	in.mu.Unlock()
	for _, unlock := range accounts {
		errs = append(errs, unlock(ctx))
	}
	for sp := range armed {
		errs = append(errs, in.obs.disarm(ctx, sp[0], sp[1]))
	}
	if locked != "" {
		errs = append(errs, in.broker.StartApp(ctx, locked))
	}
	if psp {
		code, _, err := in.obs.lab.Do(ctx, "psp", http.MethodPut, "/psp/switches", nil, map[string]any{"mode": "normal"}, nil)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("PUT /psp/switches normal answered %d", code)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
