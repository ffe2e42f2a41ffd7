package chaos

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config is one chaos run.
type Config struct {
	Seed   uint64
	Load   Load
	Faults FaultSchedule
	// Quiet is how long nothing may move (no delivery, no restart, no
	// outbox row waiting, every order finished) for the system to count as
	// at rest.
	Quiet time.Duration
	// RestTimeout bounds the wait for rest after the heal; the retries of
	// unknown answers stop then too.
	RestTimeout time.Duration
	// Tag goes into every key and customer id; random when empty.
	Tag string
	// Progress gets one line per phase; nil for none.
	Progress io.Writer
}

// Stack is a running stack and the handles the faults need. A handle may
// be nil when no fault of its kinds is asked for.
type Stack struct {
	// URLs: "order", "inventory", "payment" -> base URL of the first
	// instance; "order-2", "payment-3" and so on for the others
	// (StackFile.URLs); "psp" -> the one PSP process.
	URLs       map[string]string
	AdminToken string
	Processes  Processes
	Broker     Broker
	Database   Database
}

// Validate reports every reason the run cannot start, at once.
func (c Config) Validate(st Stack) error {
	var errs []error
	if c.Load.Rate <= 0 || c.Load.Duration <= 0 {
		errs = append(errs, errors.New("the load needs a positive rate and duration"))
	}
	if c.Load.WaveSize < 1 || c.Load.WaveSupply < 1 {
		errs = append(errs, errors.New("a scarce wave needs at least one order and one unit"))
	}
	if c.Quiet <= 0 || c.RestTimeout <= 0 {
		errs = append(errs, errors.New("quiet window and rest timeout must be positive"))
	}
	if len(c.Faults.Kinds) > 0 && len(c.Faults.Script) == 0 && c.Faults.Every < time.Second {
		errs = append(errs, errors.New("faults need at least a second between them"))
	}
	for _, svc := range Services {
		if st.URLs[svc] == "" {
			errs = append(errs, fmt.Errorf("no URL for the %s service", svc))
		}
	}
	for _, k := range c.Faults.kinds() {
		_, cluster := st.Broker.(Cluster)
		switch {
		case (k == FaultKill || k == FaultStop) && st.Processes == nil:
			errs = append(errs, fmt.Errorf("fault %s needs the services' processes", k))
		case (k == FaultBrokerClose || k == FaultBrokerRestart) && st.Broker == nil:
			errs = append(errs, fmt.Errorf("fault %s needs a broker handle", k))
		case k == FaultNodeKill && !cluster:
			errs = append(errs, fmt.Errorf("fault %s needs a broker of several nodes the run owns (scripts/up.sh --rabbit-cluster)", k))
		case (k == FaultDBKill || k == FaultDBLock) && st.Database == nil:
			errs = append(errs, fmt.Errorf("fault %s needs the database's root connection", k))
		}
	}
	return errors.Join(errs...)
}

// Run drives the load and the faults against the stack, heals, waits for
// rest, reads the snapshot and checks it. An error means the run could not
// be carried out or observed; violations are in the report.
func Run(ctx context.Context, cfg Config, st Stack) (*Report, error) {
	if err := cfg.Validate(st); err != nil {
		return nil, err
	}
	if cfg.Tag == "" {
		cfg.Tag = newTag()
	}
	say := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "[chaos %s] "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
		}
	}
	obs := newObserver(st.URLs, st.AdminToken)
	if len(cfg.Faults.Instances) == 0 {
		cfg.Faults.Instances = obs.all()
	}
	if c, ok := st.Broker.(Cluster); ok && len(cfg.Faults.Nodes) == 0 {
		cfg.Faults.Nodes = c.Nodes()
	}
	plan := NewPlan(cfg.Seed, cfg.Load, cfg.Faults)
	rep := &Report{Seed: cfg.Seed, Tag: cfg.Tag, Load: cfg.Load, FaultKinds: cfg.Faults.kinds(), FaultEvery: cfg.Faults.Every,
		Quiet: Seconds(cfg.Quiet)}

	// Before: the stack is up, the sold-out SKU has no stock, what was
	// there before is recorded so it is not blamed on this run.
	if err := obs.waitReady(ctx, 30*time.Second); err != nil {
		return nil, fmt.Errorf("the stack is not up (start it with scripts/up.sh): %w", err)
	}
	start, err := obs.stock(ctx)
	if err != nil {
		return nil, err
	}
	if s, ok := start[SoldOutSKU]; !ok || s.OnHand != 0 {
		return nil, fmt.Errorf("%s must exist without stock (on hand %d): the insufficient-stock orders rely on it", SoldOutSKU, s.OnHand)
	}
	watermark, err := obs.lastOrderID(ctx)
	if err != nil {
		return nil, err
	}
	base, err := obs.readBaseline(ctx)
	if err != nil {
		return nil, err
	}
	receipts := map[string]int{}
	for sku, n := range plan.restock() {
		if _, err := obs.receive(ctx, sku, n); err != nil {
			return nil, fmt.Errorf("restock before the run: %w", err)
		}
		receipts[sku] += n
	}
	say("seed %d, tag %s: %d requests over %s, %d faults, %d scarce waves", cfg.Seed, cfg.Tag, len(plan.Requests),
		cfg.Load.Duration, len(plan.Faults), len(plan.Waves))

	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	var samplers sync.WaitGroup
	samplers.Add(1)
	go func() { defer samplers.Done(); obs.sample(sampleCtx) }()

	// The run: load and faults side by side. A wave's receipt waits until
	// no fault is in progress, so the booked supply is never in doubt.
	t0 := time.Now()
	rep.Started = t0
	var quietZone sync.Mutex
	inj := &injector{obs: obs, procs: st.Processes, broker: st.Broker, db: st.Database, start: t0, stopped: map[int]bool{}, zone: &quietZone}
	drv := &loader{obs: obs, tag: cfg.Tag, start: t0, settle: t0.Add(cfg.Load.Duration + 2*cfg.RestTimeout)}
	uncertain := map[string]int{}
	var waveNotes []string
	var receiptMu sync.Mutex
	wave := func(ctx context.Context, w int) {
		quietZone.Lock()
		defer quietZone.Unlock()
		n := plan.Waves[w].Supply
		ok, err := obs.receive(ctx, ScarceSKU, n)
		receiptMu.Lock()
		defer receiptMu.Unlock()
		switch {
		case err == nil:
			receipts[ScarceSKU] += n
		case ok:
			waveNotes = append(waveNotes, fmt.Sprintf("scarce wave %d: %v: no units booked", w+1, err))
		default:
			uncertain[ScarceSKU] += n
			waveNotes = append(waveNotes, fmt.Sprintf("scarce wave %d: %v: booked or not, unknown (the stock check allows either)", w+1, err))
		}
	}
	// Every planned fault runs, even one pushed past the end of the load by
	// a slow predecessor (a broker restart takes seconds): the run asked
	// for it, and the saga's last steps are still under way then.
	var faultsDone sync.WaitGroup
	faultsDone.Add(1)
	go func() { defer faultsDone.Done(); rep.Faults = inj.run(ctx, plan.Faults) }()

	var loadDone sync.WaitGroup
	loadDone.Add(1)
	go func() { defer loadDone.Done(); drv.run(ctx, plan, wave) }()

	faultsDone.Wait()
	say("faults over (%d injected); healing", len(rep.Faults))
	if err := inj.heal(context.WithoutCancel(ctx)); err != nil {
		rep.Notes = append(rep.Notes, "heal: "+err.Error())
	}
	if err := obs.waitReady(ctx, 90*time.Second); err != nil {
		rep.Notes = append(rep.Notes, "after the heal: "+err.Error())
	}
	healed := time.Now()
	loadDone.Wait()
	rep.Notes = append(rep.Notes, waveNotes...)
	say("load over: %d keys sent; waiting for rest (quiet %s, at most %s)", len(drv.requests()), cfg.Quiet, cfg.RestTimeout)

	rest := obs.waitRest(ctx, watermark, cfg.Tag, start, cfg.Quiet, cfg.RestTimeout)
	rest.After = time.Since(healed)
	stopSampling()
	samplers.Wait()
	say("rest %v after %s; reading the snapshot", rest.Reached, round(rest.After))

	snap, foreign, err := obs.snapshot(ctx, watermark, cfg.Tag, base)
	if err != nil {
		return nil, fmt.Errorf("reading the snapshot: %w", err)
	}
	snap.Requests = drv.requests()
	snap.StockStart = start
	snap.Receipts = receipts
	snap.UncertainReceipts = uncertain
	snap.MinAvailable = obs.lowestAvailable()
	snap.Rest = rest
	rep.Duplicates = obs.duplicates()
	if foreign > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d orders of other clients were created during the run: the stock check counts only this run's orders", foreign))
	}
	rep.summarize(snap)
	say("%d violations", len(rep.Violations))
	return rep, nil
}

// snapshot reads the state at rest: this run's orders with their records,
// stock and leftovers. foreign counts orders created meanwhile by others.
func (o *observer) snapshot(ctx context.Context, watermark uint64, tag string, b baseline) (Snapshot, int, error) {
	s := Snapshot{}
	list, err := o.ordersAfter(ctx, watermark)
	if err != nil {
		return s, 0, err
	}
	var mine []Order
	foreign := 0
	for _, ord := range list {
		if ofRun(ord.Customer, tag) {
			mine = append(mine, ord)
		} else {
			foreign++
		}
	}
	if s.Orders, err = o.orders(ctx, mine); err != nil {
		return s, 0, err
	}
	if s.StockEnd, err = o.stock(ctx); err != nil {
		return s, 0, err
	}
	if s.Services, err = o.leftoversAtRest(ctx, b); err != nil {
		return s, 0, err
	}
	return s, foreign, nil
}

func ofRun(customer, tag string) bool {
	p := "chaos-" + tag + "-"
	return strings.HasPrefix(customer, p) || strings.HasPrefix(customer, "decline-"+p)
}

// waitRest waits until the system is at rest: every service ready, every
// order of the run finished with no refund under way, no outbox row
// pending or sending, the reserved stock back where it started, and no
// delivery and no restart for the quiet window.
func (o *observer) waitRest(ctx context.Context, watermark uint64, tag string, start map[string]Stock, quiet, timeout time.Duration) Rest {
	deadline := time.Now().Add(timeout)
	var quietSince time.Time
	var lastSig string
	waiting := ""
	began := time.Now()
	for {
		sig, why := o.restSignature(ctx, watermark, tag, start)
		switch {
		case why != "":
			quietSince, waiting = time.Time{}, why
		case sig != lastSig || quietSince.IsZero():
			quietSince, waiting = time.Now(), "the quiet window"
		case time.Since(quietSince) >= quiet:
			return Rest{Reached: true, After: time.Since(began)}
		}
		lastSig = sig
		if time.Now().After(deadline) {
			return Rest{Reached: false, After: time.Since(began), Waiting: waiting}
		}
		select {
		case <-ctx.Done():
			return Rest{Reached: false, After: time.Since(began), Waiting: "interrupted"}
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// restSignature returns what must stay unchanged over the quiet window
// (each instance's start time and delivery count), or why the system is not
// at rest yet.
func (o *observer) restSignature(ctx context.Context, watermark uint64, tag string, start map[string]Stock) (string, string) {
	var sig []string
	for _, svc := range Services {
		// The outbox is the service's table: one instance answers for all.
		var sum struct {
			ByStatus map[string]int64 `json:"by_status"`
		}
		if err := o.lab.Get(ctx, svc, "/admin/outbox/summary", &sum); err != nil {
			return "", svc + " to answer /admin/outbox/summary"
		}
		if n := sum.ByStatus["pending"] + sum.ByStatus["sending"]; n > 0 {
			return "", fmt.Sprintf("%d %s outbox rows to be sent", n, svc)
		}
		for _, in := range o.instances[svc] {
			if !o.ready(ctx, in) {
				return "", in + " to be ready"
			}
			started, err := o.startedAt(ctx, in)
			if err != nil {
				return "", in + " to answer /healthz"
			}
			d, err := o.lab.Metric(ctx, in, "consumer_deliveries_total")
			if err != nil {
				return "", in + " to answer /metrics"
			}
			sig = append(sig, in+"@"+started+"="+strconv.FormatFloat(d, 'f', 0, 64))
		}
	}
	list, err := o.ordersAfter(ctx, watermark)
	if err != nil {
		return "", "the order list"
	}
	open, refunding := 0, 0
	for _, ord := range list {
		if !ofRun(ord.Customer, tag) {
			continue
		}
		if !terminal(ord.Status) {
			open++
		} else if ord.RefundStatus == "pending" {
			refunding++
		}
	}
	if open > 0 || refunding > 0 {
		return "", fmt.Sprintf("%d orders to finish and %d refunds to complete", open, refunding)
	}
	st, err := o.stock(ctx)
	if err != nil {
		return "", "the stock"
	}
	var held []string
	for sku, s := range st {
		if s.Reserved != start[sku].Reserved {
			held = append(held, fmt.Sprintf("%s %d", sku, s.Reserved-start[sku].Reserved))
		}
	}
	if len(held) > 0 {
		slices.Sort(held)
		return "", "reserved stock to be released or committed (" + strings.Join(held, ", ") + ")"
	}
	return strings.Join(sig, " "), ""
}

func newTag() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return strconv.FormatUint(uint64(b[0])<<24|uint64(b[1])<<16|uint64(b[2])<<8|uint64(b[3]), 36)
}
