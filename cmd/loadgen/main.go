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
	"encoding/json"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/program"
	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/base/wire"
)

func main() {
	program.Main("loadgen", func(ctx context.Context) error {
		return run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	})
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
			body, _ := json.Marshal(wire.ReceiptRequest{Quantity: q})
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
	var page wire.OrderList
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return nil, fmt.Errorf("GET /orders: %w", err)
	}
	return page.Orders, nil
}

func (r *runner) followLoop(ctx context.Context) {
	retry.Every(ctx, r.cfg.poll, func() {
		if err := r.tracker.sweep(ctx); err != nil && ctx.Err() == nil {
			r.addErr("follow")
		}
	})
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
