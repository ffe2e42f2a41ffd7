// Command loadgen offers orders to a running stack (scripts/up.sh -d) over
// HTTP and follows each one to its terminal state, then reports throughput,
// latency, outcomes, errors and the orders that never finished.
//
//	go run ./cmd/loadgen -rate 200 -duration 60s     open loop: 200 orders/s for a minute
//	go run ./cmd/loadgen -rate 300 -count 5000       open loop: 5,000 orders at 300/s
//	go run ./cmd/loadgen -workers 32 -duration 30s   closed loop: as fast as 32 clients go
//	go run ./cmd/loadgen -rate 100 -decline 0.05 -overstock 0.02 -json
//
// Open loop means the sends follow a timetable (send i at start + i/rate)
// and never wait for earlier answers: a slow system gets the same offered
// load, and its slowness shows in the latencies instead of hiding in a
// lower send rate. At most -max-inflight requests are outstanding; a send
// that starts more than -late after its time (no free slot, or the
// generator itself starved of CPU) is counted as late.
//
// Before the run the SKUs of the mix are restocked through the inventory
// service (POST /stock/{sku}/receipts) so a long run never runs out
// (-no-restock to skip). See docs/performance.md for the method and the
// figures measured with it.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/relmsg/ordersaga/pkg/retry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// config is the command line.
type config struct {
	orderURL, inventoryURL string
	rate                   float64
	duration               time.Duration
	count                  int
	workers                int
	maxInflight            int
	late                   time.Duration
	mix                    []skuWeight
	lines, qty             int
	decline, overstock     float64
	soldOut                string
	restock                bool
	restockMargin          float64
	follow                 string
	poll                   time.Duration
	page                   int
	drain                  time.Duration
	timeout                time.Duration
	json                   bool
	quiet                  bool
	seed                   uint64
	keyPrefix              string
	watch, runDir          string
	listMax                int
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := func(key, d string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return d
	}
	fs.StringVar(&c.orderURL, "order-url", def("ORDER_URL", "http://127.0.0.1:8081"), "order service base URL (env ORDER_URL)")
	fs.StringVar(&c.inventoryURL, "inventory-url", def("INVENTORY_URL", "http://127.0.0.1:8082"), "inventory service base URL, for restocking (env INVENTORY_URL)")
	fs.Float64Var(&c.rate, "rate", 100, "offered load, orders per second (open loop)")
	fs.DurationVar(&c.duration, "duration", 60*time.Second, "how long to send (with -count alone: no time limit)")
	fs.IntVar(&c.count, "count", 0, "total orders to send (0: rate x duration)")
	fs.IntVar(&c.workers, "workers", 0, "closed loop: N clients each sending its next order when the last is answered (ignores -rate)")
	fs.IntVar(&c.maxInflight, "max-inflight", 256, "open loop: most POSTs outstanding at once")
	fs.DurationVar(&c.late, "late", 10*time.Millisecond, "a send starting this much after its scheduled time is late")
	mix := fs.String("skus", "SKU-1,SKU-2,SKU-3,SKU-4", "SKU mix, with optional weights: SKU-1:3,SKU-2:1")
	fs.IntVar(&c.lines, "lines", 2, "most lines (distinct SKUs) per order")
	fs.IntVar(&c.qty, "qty", 2, "most units per line")
	fs.Float64Var(&c.decline, "decline", 0, "share of orders from a customer the PSP declines (expected cancelled)")
	fs.Float64Var(&c.overstock, "overstock", 0, "share of orders for -soldout (expected rejected)")
	fs.StringVar(&c.soldOut, "soldout", "SKU-SOLDOUT", "SKU with no stock, for -overstock (never restocked)")
	noRestock := fs.Bool("no-restock", false, "do not top up the stock of the mix before the run")
	fs.Float64Var(&c.restockMargin, "restock-margin", 1.5, "restock this many times the most the run can take")
	fs.StringVar(&c.follow, "follow", "list", "how orders are followed to a terminal state: list (GET /orders pages) or none")
	fs.DurationVar(&c.poll, "poll", time.Second, "interval between follow sweeps")
	fs.IntVar(&c.page, "page", 500, "orders per list page (1..500)")
	fs.DurationVar(&c.drain, "drain", 30*time.Second, "after the last send, wait this long for open orders to finish")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "HTTP request timeout")
	fs.BoolVar(&c.json, "json", false, "print the summary as JSON on stdout")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress line")
	fs.Uint64Var(&c.seed, "seed", 0, "random seed of the order mix (0: random)")
	fs.StringVar(&c.keyPrefix, "key-prefix", "", "idempotency key prefix (default lg-<time>-<random>)")
	fs.StringVar(&c.watch, "watch", "auto", "processes to sample for RSS and CPU: auto (up.sh services, mariadbd, beam.smp), name=pid,..., or none")
	fs.StringVar(&c.runDir, "run-dir", ".run", "where scripts/up.sh keeps stack.json (for -watch auto)")
	fs.IntVar(&c.listMax, "list-max", 50, "most non-terminal orders listed in the text summary")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["count"] && !set["duration"] {
		c.duration = 0
	}
	c.restock = !*noRestock

	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	var err error
	if c.mix, err = parseMix(*mix); err != nil {
		errs = append(errs, err)
	}
	if c.workers < 0 {
		bad("-workers must be >= 0")
	}
	if c.workers == 0 && !(c.rate > 0) {
		bad("-rate must be > 0 (or use -workers)")
	}
	if c.count < 0 || c.duration < 0 || (c.count == 0 && c.duration == 0) {
		bad("give a positive -duration or -count")
	}
	if c.maxInflight < 1 {
		bad("-max-inflight must be >= 1")
	}
	if c.lines < 1 || c.qty < 1 {
		bad("-lines and -qty must be >= 1")
	}
	if c.decline < 0 || c.overstock < 0 || c.decline+c.overstock > 1 {
		bad("-decline and -overstock are shares: each >= 0, together <= 1")
	}
	if c.follow != "list" && c.follow != "none" {
		bad("-follow must be list or none")
	}
	if c.page < 1 || c.page > 500 {
		bad("-page must be within 1..500 (the order service's limit)")
	}
	if c.poll <= 0 || c.timeout <= 0 || c.drain < 0 {
		bad("-poll and -timeout must be > 0, -drain >= 0")
	}
	for _, u := range []string{c.orderURL, c.inventoryURL} {
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") {
			bad("%q is not an http(s) URL", u)
		}
	}
	c.orderURL = strings.TrimRight(c.orderURL, "/")
	c.inventoryURL = strings.TrimRight(c.inventoryURL, "/")
	if c.seed == 0 {
		c.seed = mrand.Uint64()
	}
	if c.keyPrefix == "" {
		b := make([]byte, 3)
		_, _ = rand.Read(b)
		c.keyPrefix = fmt.Sprintf("lg-%d-%s", time.Now().Unix(), hex.EncodeToString(b))
	}
	return c, errors.Join(errs...)
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	r := newRunner(cfg, stderr)
	if err := r.check(ctx); err != nil {
		return err
	}
	if cfg.restock {
		if err := r.restock(ctx); err != nil {
			return err
		}
	}
	sum := r.run(ctx)
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(sum)
	}
	sum.print(stdout, cfg.listMax)
	return nil
}

// runner is one load run.
type runner struct {
	cfg    config
	log    io.Writer
	client *http.Client

	genMu sync.Mutex
	gen   *generator

	tracker *tracker
	watch   *procWatch

	sent, accepted, late, inflight, clockOdd atomic.Int64
	maxLag                                   atomic.Int64 // nanoseconds

	mu           sync.Mutex
	errs         map[string]int
	outcomes     map[string]int
	unexpected   map[string]int
	reasons      map[string]int // status_reason of unexpected outcomes
	timeline     []second       // one entry per progress tick
	terminalAt   []time.Time    // updated_at of each terminal order
	postAccepted histogram
	postTerminal histogram
	byOutcome    map[string]*histogram
}

func newRunner(cfg config, log io.Writer) *runner {
	limit := max(cfg.maxInflight, cfg.workers) + 8
	tr := &http.Transport{
		Proxy:               nil, // straight to the service, whatever HTTP_PROXY says
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        limit,
		MaxIdleConnsPerHost: limit,
		IdleConnTimeout:     90 * time.Second,
	}
	r := &runner{
		cfg:    cfg,
		log:    log,
		client: &http.Client{Transport: tr, Timeout: cfg.timeout},
		gen: &generator{mix: cfg.mix, maxLines: cfg.lines, maxQty: cfg.qty, decline: cfg.decline,
			overstock: cfg.overstock, soldOut: cfg.soldOut, rng: mrand.New(mrand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15))},
		errs: map[string]int{}, outcomes: map[string]int{}, unexpected: map[string]int{}, reasons: map[string]int{},
		byOutcome: map[string]*histogram{"confirmed": {}, "rejected": {}, "cancelled": {}},
	}
	r.tracker = newTracker(r.listOrders, cfg.page, r.onTerminal)
	return r
}

// check fails fast, with a clear message, when the order service is not up.
func (r *runner) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.cfg.orderURL+"/readyz", nil)
	resp, err := r.client.Do(req)
	if err != nil {
		return fmt.Errorf("order service at %s is not reachable (start the stack with scripts/up.sh -d): %w", r.cfg.orderURL, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("order service at %s is not ready: /readyz answered %d", r.cfg.orderURL, resp.StatusCode)
	}
	return nil
}

// planned is how many orders the run will send, for restocking.
func (r *runner) planned() int {
	switch {
	case r.cfg.workers > 0 && r.cfg.count > 0:
		return r.cfg.count
	case r.cfg.workers > 0:
		// Closed loop: no timetable. Plan for 1,000 orders/s, well above
		// what this stack completes.
		return int(r.cfg.duration.Seconds() * 1000)
	}
	n := int(math.Ceil(r.cfg.rate * r.cfg.duration.Seconds()))
	if r.cfg.count > 0 && (r.cfg.duration == 0 || r.cfg.count < n) {
		n = r.cfg.count
	}
	return n
}

func (r *runner) restock(ctx context.Context) error {
	plan := restockPlan(r.cfg.mix, r.cfg.lines, r.cfg.qty, r.planned(), r.cfg.restockMargin)
	skus := make([]string, 0, len(plan))
	for s := range plan {
		skus = append(skus, s)
	}
	sort.Strings(skus)
	for _, sku := range skus {
		for left := plan[sku]; left > 0; {
			q := min(left, 1_000_000) // the inventory service's largest receipt
			body, _ := json.Marshal(map[string]int{"quantity": q})
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost,
				r.cfg.inventoryURL+"/stock/"+url.PathEscape(sku)+"/receipts", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			// A receipt wants a key of its own (one per receipt of this run).
			req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-restock-%s-%d", r.cfg.keyPrefix, sku, left))
			resp, err := r.client.Do(req)
			if err != nil {
				return fmt.Errorf("restock %s at %s (use -no-restock to skip): %w", sku, r.cfg.inventoryURL, err)
			}
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("restock %s: %d %s", sku, resp.StatusCode, bytes.TrimSpace(msg))
			}
			left -= q
		}
	}
	if !r.cfg.quiet {
		parts := make([]string, len(skus))
		for i, sku := range skus {
			parts[i] = fmt.Sprintf("%s +%d", sku, plan[sku])
		}
		fmt.Fprintf(r.log, "restocked %s\n", strings.Join(parts, ", "))
	}
	return nil
}

// run sends, follows and drains, and returns the summary.
func (r *runner) run(ctx context.Context) *summary {
	w, err := newProcWatch(r.cfg.watch, r.cfg.runDir)
	if err != nil {
		fmt.Fprintln(r.log, "loadgen:", err)
		w, _ = newProcWatch("", "")
	}
	r.watch = w
	r.watch.begin()

	start := time.Now()
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var bgWG sync.WaitGroup
	if r.cfg.follow == "list" {
		bgWG.Add(1)
		go func() { defer bgWG.Done(); r.followLoop(bg) }()
	}
	bgWG.Add(1)
	go func() { defer bgWG.Done(); r.progressLoop(bg, start) }()

	if r.cfg.workers > 0 {
		r.closedLoop(ctx, start)
	} else {
		r.openLoop(ctx, start)
	}
	sendEnd := time.Now()

	// Drain: wait for the open orders to finish, unless interrupted.
	if r.cfg.follow == "list" {
		deadline := time.Now().Add(r.cfg.drain)
		for ctx.Err() == nil && r.tracker.outstanding() > 0 && time.Now().Before(deadline) {
			retry.Wait(ctx, 100*time.Millisecond)
		}
	}
	stopBG()
	bgWG.Wait()
	if r.cfg.follow == "list" && r.tracker.outstanding() > 0 {
		// One last look, so an order finished in the last poll interval
		// is not reported open.
		fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := r.tracker.sweep(fctx); err != nil {
			r.addErr("follow")
		}
		cancel()
	}
	procs, busy := r.watch.end()
	if !r.cfg.quiet && isTerminal(r.log) {
		fmt.Fprintln(r.log)
	}
	return r.summarize(start, sendEnd, time.Now(), procs, busy)
}

// openLoop sends on the timetable until it is done or ctx ends, then waits
// for the answers of the requests in flight.
func (r *runner) openLoop(ctx context.Context, start time.Time) {
	s := schedule{start: start, rate: r.cfg.rate, count: r.cfg.count}
	if r.cfg.duration > 0 {
		s.end = start.Add(r.cfg.duration)
	}
	slots := make(chan struct{}, r.cfg.maxInflight)
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := 0; !s.done(i); {
		for due := s.due(time.Now()); i < due; i++ {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			lag := time.Since(s.at(i))
			if lag > r.cfg.late {
				r.late.Add(1)
			}
			for {
				old := r.maxLag.Load()
				if int64(lag) <= old || r.maxLag.CompareAndSwap(old, int64(lag)) {
					break
				}
			}
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				defer func() { <-slots }()
				r.post(ctx, i)
			}(i)
		}
		if s.done(i) {
			break
		}
		timer.Reset(time.Until(s.at(i)))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
	}
}

// closedLoop runs N clients, each sending its next order once the last one
// is answered, until the count or the duration is reached.
func (r *runner) closedLoop(ctx context.Context, start time.Time) {
	var next atomic.Int64
	var wg sync.WaitGroup
	end := time.Time{}
	if r.cfg.duration > 0 {
		end = start.Add(r.cfg.duration)
	}
	for range r.cfg.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && (end.IsZero() || time.Now().Before(end)) {
				i := int(next.Add(1) - 1)
				if r.cfg.count > 0 && i >= r.cfg.count {
					return
				}
				r.post(ctx, i)
			}
		}()
	}
	wg.Wait()
}

// post creates order i and records the answer.
func (r *runner) post(ctx context.Context, i int) {
	r.genMu.Lock()
	body, k := r.gen.next(i)
	r.genMu.Unlock()
	b, _ := json.Marshal(body)
	key := fmt.Sprintf("%s-%d", r.cfg.keyPrefix, i)

	r.sent.Add(1)
	r.inflight.Add(1)
	defer r.inflight.Add(-1)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.cfg.orderURL+"/orders", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	start := time.Now()
	resp, err := r.client.Do(req)
	if err != nil {
		r.addErr(classify(ctx, err))
		return
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err != nil {
		r.addErr("read_body")
		return
	}
	if resp.StatusCode != http.StatusAccepted {
		r.addErr(fmt.Sprintf("http_%d", resp.StatusCode))
		return
	}
	var v orderView
	if err := json.Unmarshal(data, &v); err != nil {
		r.addErr("decode")
		return
	}
	id, err := strconv.ParseUint(v.OrderID, 10, 64)
	if err != nil {
		r.addErr("decode")
		return
	}
	r.accepted.Add(1)
	r.postAccepted.add(took)
	// POST->terminal uses the server's updated_at against our clock: check
	// that the two agree (created_at must fall inside the request).
	if v.CreatedAt.Before(start.Add(-5*time.Millisecond)) || v.CreatedAt.After(start.Add(took+5*time.Millisecond)) {
		r.clockOdd.Add(1)
	}
	o := &tracked{id: id, key: key, kind: k, sent: start, status: v.Status}
	if terminal(v.Status) { // an idempotent replay of a finished order
		r.onTerminal(o, v)
		return
	}
	if r.cfg.follow == "list" {
		r.tracker.add(o)
	}
}

func classify(ctx context.Context, err error) string {
	var ne net.Error
	switch {
	case ctx.Err() != nil:
		return "interrupted"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection_refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection_reset"
	default:
		return "transport"
	}
}

func (r *runner) addErr(kind string) {
	r.mu.Lock()
	r.errs[kind]++
	r.mu.Unlock()
}

func (r *runner) onTerminal(o *tracked, v orderView) {
	lat := v.UpdatedAt.Sub(o.sent)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes[v.Status]++
	r.terminalAt = append(r.terminalAt, v.UpdatedAt)
	if want := o.kind.expected(); want != v.Status {
		r.unexpected[fmt.Sprintf("%s->%s", o.kind, v.Status)]++
		reason := v.StatusReason
		if len(reason) > 80 {
			reason = reason[:80]
		}
		r.reasons[reason]++
	}
	r.postTerminal.add(lat)
	if h, ok := r.byOutcome[v.Status]; ok {
		h.add(lat)
	}
}

// listOrders is GET /orders?before=&limit=.
func (r *runner) listOrders(ctx context.Context, before uint64, limit int) ([]orderView, error) {
	u := fmt.Sprintf("%s/orders?limit=%d&before=%d", r.cfg.orderURL, limit, before)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /orders: %d", resp.StatusCode)
	}
	var page struct {
		Orders []orderView `json:"orders"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return nil, fmt.Errorf("GET /orders: %w", err)
	}
	return page.Orders, nil
}

func (r *runner) followLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := r.tracker.sweep(ctx); err != nil && ctx.Err() == nil {
			r.addErr("follow")
		}
	}
}

// progressLoop prints one line a second and samples the watched processes.
func (r *runner) progressLoop(ctx context.Context, start time.Time) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var lastSent, lastTerm int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		other := r.watch.sample()
		sent := r.sent.Load()
		r.mu.Lock()
		term := int64(len(r.terminalAt))
		nerr := 0
		for _, n := range r.errs {
			nerr += n
		}
		r.timeline = append(r.timeline, second{T: int(math.Round(time.Since(start).Seconds())), Sent: sent,
			Accepted: r.accepted.Load(), Terminal: term, Open: r.tracker.outstanding(), Late: r.late.Load(),
			Errors: nerr, OtherCores: other})
		r.mu.Unlock()
		if r.cfg.quiet {
			continue
		}
		// On a terminal the line rewrites itself; in a log, one line a second.
		pre, post := "", "\n"
		if isTerminal(r.log) {
			pre, post = "\r", "   "
		}
		fmt.Fprintf(r.log, "%s[%4.0fs] sent %d (%d/s)  accepted %d  terminal %d (%d/s)  open %d  in-flight %d  late %d  errors %d%s",
			pre, time.Since(start).Seconds(), sent, sent-lastSent, r.accepted.Load(), term, term-lastTerm,
			r.tracker.outstanding(), r.inflight.Load(), r.late.Load(), nerr, post)
		lastSent, lastTerm = sent, term
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
