package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/url"
	"strings"
	"time"
)

// The command line: the flags, their defaults and the checks of what was
// given.

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

// parseFlags reads the command line (and the two URLs' environment
// defaults), fills in the derived fields and reports every bad flag at once.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mix, noRestock := c.define(fs, getenv)
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
	var mixErr error
	c.mix, mixErr = parseMix(*mix)
	bad := errors.Join(mixErr, errors.Join(c.check()...))
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
	return c, bad
}

// define declares the flags on fs; the two it returns (the SKU mix and
// -no-restock) are turned into config fields after parsing.
func (c *config) define(fs *flag.FlagSet, getenv func(string) string) (mix *string, noRestock *bool) {
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
	mix = fs.String("skus", "SKU-1,SKU-2,SKU-3,SKU-4", "SKU mix, with optional weights: SKU-1:3,SKU-2:1")
	fs.IntVar(&c.lines, "lines", 2, "most lines (distinct SKUs) per order")
	fs.IntVar(&c.qty, "qty", 2, "most units per line")
	fs.Float64Var(&c.decline, "decline", 0, "share of orders from a customer the PSP declines (expected cancelled)")
	fs.Float64Var(&c.overstock, "overstock", 0, "share of orders for -soldout (expected rejected)")
	fs.StringVar(&c.soldOut, "soldout", "SKU-SOLDOUT", "SKU with no stock, for -overstock (never restocked)")
	noRestock = fs.Bool("no-restock", false, "do not top up the stock of the mix before the run")
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
	return mix, noRestock
}

// check lists what is wrong with the parsed flags, every bad one at once.
func (c *config) check() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
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
	return errs
}
