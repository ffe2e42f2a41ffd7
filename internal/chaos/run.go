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

// Target is a running stack and the handles the faults need. A handle may
// be nil when no fault of its kinds is asked for.
type Target struct {
	// URLs: "order", "inventory", "payment" -> base URL of the first
	// instance; "order-2", "payment-3" and so on for the others
	// (StackFile.URLs); "psp" -> the one PSP process.
	URLs       map[string]string
	AdminToken string
	Processes  Processes
	Broker     Broker
	Database   Database
	// Bus is the broker over AMQP, in the stack's namespace: the
	// copy-take fault publishes through it, the node-kill of a retry
	// tier's leader names the tiers with it.
	Bus *Bus
}

// Validate reports every reason the run cannot start, at once.
func (c Config) Validate(st Target) error {
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
		case (k == FaultDBKill || k == FaultDBLock || k == FaultDBOutage) && st.Database == nil:
			errs = append(errs, fmt.Errorf("fault %s needs the database's root connection", k))
		case k == FaultCopyTake && st.Bus == nil:
			errs = append(errs, fmt.Errorf("fault %s needs the stack's broker over AMQP", k))
		}
	}
	return errors.Join(errs...)
}

// Run drives the load and the faults against the stack, heals, waits for
// rest, reads the snapshot and checks it. An error means the run could not
// be carried out or observed; violations are in the report.
func Run(ctx context.Context, cfg Config, st Target) (*Report, error) {
	r, err := prepare(ctx, cfg, st)
	if err != nil {
		return nil, err
	}
	r.drive(ctx)
	if err := r.read(ctx); err != nil {
		return nil, err
	}
	r.rep.live = r
	return r.rep, nil
}

// runner is one run in progress: what each phase leaves for the next.
type runner struct {
	cfg  Config
	st   Target
	obs  *observer
	plan Plan
	rep  *Report
	drv  *loader

	stockStart map[string]Stock
	watermark  uint64
	base       baseline
	captures   map[string]string // copy-take: each consumer's capture queue
	healed     time.Time
	snap       Snapshot // at rest, as checked

	mu        sync.Mutex // the scarce waves' bookings
	receipts  map[string]int
	uncertain map[string]int
	waveNotes []string
}

func (r *runner) say(format string, args ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "[chaos %s] "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
}

// prepare checks the config, draws the plan and readies the stack: it is
// up, the sold-out SKU has no stock, what was there before is recorded so
// it is not blamed on this run, the plentiful SKUs are restocked.
func prepare(ctx context.Context, cfg Config, st Target) (*runner, error) {
	if err := cfg.Validate(st); err != nil {
		return nil, err
	}
	if cfg.Tag == "" {
		cfg.Tag = newTag()
	}
	r := &runner{cfg: cfg, st: st, obs: newObserver(st.URLs, st.AdminToken), receipts: map[string]int{}, uncertain: map[string]int{}}
	r.obs.bus = st.Bus
	if len(r.cfg.Faults.Instances) == 0 {
		r.cfg.Faults.Instances = r.obs.all()
	}
	if c, ok := st.Broker.(Cluster); ok && len(r.cfg.Faults.Nodes) == 0 {
		r.cfg.Faults.Nodes = c.Nodes()
	}
	r.plan = NewPlan(cfg.Seed, cfg.Load, r.cfg.Faults)
	r.rep = &Report{Seed: cfg.Seed, Tag: cfg.Tag, Load: cfg.Load, FaultKinds: r.cfg.Faults.kinds(), FaultEvery: cfg.Faults.Every,
		Quiet: Seconds(cfg.Quiet)}
	if err := r.obs.waitReady(ctx, 30*time.Second); err != nil {
		return nil, fmt.Errorf("the stack is not up (start it with scripts/up.sh): %w", err)
	}
	var err error
	if r.stockStart, err = r.obs.stock(ctx); err != nil {
		return nil, err
	}
	if s, ok := r.stockStart[SoldOutSKU]; !ok || s.OnHand != 0 {
		return nil, fmt.Errorf("%s must exist without stock (on hand %d): the insufficient-stock orders rely on it", SoldOutSKU, s.OnHand)
	}
	if r.watermark, err = r.obs.lastOrderID(ctx); err != nil {
		return nil, err
	}
	if r.base, err = r.obs.readBaseline(ctx); err != nil {
		return nil, err
	}
	if slices.Contains(r.rep.FaultKinds, FaultCopyTake) {
		r.captures = map[string]string{}
		for _, c := range Consumers {
			if r.captures[c.Name], err = st.Bus.Capture(ctx, c, cfg.Tag); err != nil {
				return nil, fmt.Errorf("copy-take: %w", err)
			}
		}
	}
	for sku, n := range r.plan.restock() {
		if _, err := r.obs.receive(ctx, sku, n); err != nil {
			return nil, fmt.Errorf("restock before the run: %w", err)
		}
		r.receipts[sku] += n
	}
	r.say("seed %d, tag %s: %d requests over %s, %d faults, %d scarce waves", cfg.Seed, cfg.Tag, len(r.plan.Requests),
		cfg.Load.Duration, len(r.plan.Faults), len(r.plan.Waves))
	return r, nil
}

// drive runs the load and the faults side by side, then heals. A wave's
// receipt waits until no fault is in progress, so the booked supply is
// never in doubt.
func (r *runner) drive(ctx context.Context) {
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var samplers sync.WaitGroup
	samplers.Go(func() { r.obs.sample(sampleCtx) })
	defer func() { stopSampling(); samplers.Wait() }()

	t0 := time.Now()
	r.rep.Started = t0
	var quietZone sync.Mutex
	r.drv = &loader{obs: r.obs, tag: r.cfg.Tag, start: t0, settle: t0.Add(r.cfg.Load.Duration + 2*r.cfg.RestTimeout),
		next: len(r.plan.Requests)}
	inj := &injector{obs: r.obs, procs: r.st.Processes, broker: r.st.Broker, db: r.st.Database, bus: r.st.Bus, start: t0,
		stopped: map[int]bool{}, zone: &quietZone, orders: r.orders, traffic: r.drv.traffic}
	if r.captures != nil {
		inj.copier = &copyTaker{obs: r.obs, bus: r.st.Bus, tag: r.cfg.Tag, captures: r.captures, armed: inj.noteArmed, traffic: r.drv.traffic}
	}
	wave := func(ctx context.Context, w int) {
		quietZone.Lock()
		defer quietZone.Unlock()
		r.bookWave(ctx, w)
	}
	// Every planned fault runs, even one pushed past the end of the load by
	// a slow predecessor (a broker restart takes seconds): the run asked
	// for it, and the saga's last steps are still under way then.
	var faultsDone, loadDone sync.WaitGroup
	faultsDone.Go(func() { r.rep.Faults = inj.run(ctx, r.plan.Faults) })
	loadDone.Go(func() { r.drv.run(ctx, r.plan, wave) })
	faultsDone.Wait()
	r.say("faults over (%d injected); healing", len(r.rep.Faults))
	if err := inj.heal(context.WithoutCancel(ctx)); err != nil {
		r.rep.Notes = append(r.rep.Notes, "heal: "+err.Error())
	}
	if err := r.obs.waitReady(ctx, 90*time.Second); err != nil {
		r.rep.Notes = append(r.rep.Notes, "after the heal: "+err.Error())
	}
	r.healed = time.Now()
	loadDone.Wait()
	r.drv.extras.Wait()
	r.rep.Notes = append(r.rep.Notes, r.waveNotes...)
	r.say("load over: %d keys sent; waiting for rest (quiet %s, at most %s)", len(r.drv.requests()), r.cfg.Quiet, r.cfg.RestTimeout)
	rest := r.obs.waitRest(ctx, r.watermark, r.cfg.Tag, r.stockStart, r.cfg.Quiet, r.cfg.RestTimeout)
	rest.After = time.Since(r.healed)
	r.snap.Rest = rest
}

// bookWave receives the supply of scarce wave w.
func (r *runner) bookWave(ctx context.Context, w int) {
	n := r.plan.Waves[w].Supply
	ok, err := r.obs.receive(ctx, ScarceSKU, n)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil:
		r.receipts[ScarceSKU] += n
	case ok:
		r.waveNotes = append(r.waveNotes, fmt.Sprintf("scarce wave %d: %v: no units booked", w+1, err))
	default:
		r.uncertain[ScarceSKU] += n
		r.waveNotes = append(r.waveNotes, fmt.Sprintf("scarce wave %d: %v: booked or not, unknown (the stock check allows either)", w+1, err))
	}
}

// read reads the snapshot at rest, and checks it into the report.
func (r *runner) read(ctx context.Context) error {
	r.say("rest %v after %s; reading the snapshot", r.snap.Rest.Reached, round(r.snap.Rest.After))
	if err := r.obs.settleOutages(ctx, r.rep.Faults); err != nil {
		return fmt.Errorf("what became of the deliveries that gave up: %w", err)
	}
	snap, foreign, err := r.obs.snapshot(ctx, r.watermark, r.cfg.Tag, r.base)
	if err != nil {
		return fmt.Errorf("reading the snapshot: %w", err)
	}
	snap.Requests = r.drv.requests()
	snap.StockStart = r.stockStart
	snap.Receipts = r.receipts
	snap.UncertainReceipts = r.uncertain
	snap.MinAvailable = r.obs.lowestAvailable()
	snap.Rest = r.snap.Rest
	snap.Faults = r.rep.Faults
	snap.Processes = r.obs.processes()
	if snap.Broker, err = r.held(ctx); err != nil {
		return fmt.Errorf("what the broker holds at rest: %w", err)
	}
	r.snap = snap
	r.rep.Duplicates = r.obs.duplicates()
	if foreign > 0 {
		r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("%d orders of other clients were created during the run: the stock check counts only this run's orders", foreign))
	}
	r.rep.summarize(snap)
	r.say("%d violations", len(r.rep.Violations))
	return nil
}

// orders lists the ids of the run's orders so far, for the db-outage
// fault's look at the journals.
func (r *runner) orders(ctx context.Context) ([]string, error) {
	list, err := r.obs.ordersAfter(ctx, r.watermark)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, o := range list {
		if ofRun(o.Customer, r.cfg.Tag) {
			ids = append(ids, o.ID)
		}
	}
	return ids, nil
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
// pending or sending, the reserved stock back where it started, nothing
// waiting on the broker for a consumer (its queue, its dead queue, its
// retry tiers), and no delivery and no restart for the quiet window.
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
	if o.bus != nil {
		// A delivery waiting in a retry tier (up to a minute after an
		// outage) moves nothing until it comes back: not at rest yet.
		backlog, err := o.bus.Backlog(ctx)
		if err != nil {
			return "", "the broker to answer (" + err.Error() + ")"
		}
		if len(backlog) > 0 {
			var waiting []string
			for _, q := range sortedKeys(backlog) {
				waiting = append(waiting, fmt.Sprintf("%s %d", q, backlog[q]))
			}
			return "", "messages waiting on the broker (" + strings.Join(waiting, ", ") + ")"
		}
	}
	return strings.Join(sig, " "), ""
}

func newTag() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return strconv.FormatUint(uint64(b[0])<<24|uint64(b[1])<<16|uint64(b[2])<<8|uint64(b[3]), 36)
}

// held is what the broker holds at rest for the consumers (Bus.Backlog),
// and on a cluster of the stack's own every message its quorum queues
// hold, which a passive declare does not show: a message a retry tier has
// dead-lettered stays in it, neither ready nor unacked, until its target
// confirms it.
func (r *runner) held(ctx context.Context) (map[string]int, error) {
	if r.st.Bus == nil {
		return nil, nil
	}
	c, ok := r.st.Broker.(Cluster)
	if !ok {
		return r.st.Bus.Backlog(ctx)
	}
	totals, err := c.QueueTotals(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, q := range r.st.Bus.consumerQueues() {
		if n := totals[q]; n > 0 {
			out[q] = n
		}
	}
	return out, nil
}
