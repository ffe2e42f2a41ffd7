package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/relmsg/ordersaga/internal/lab"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/wire"
)

// observer sees the stack the way an operator does: through the services'
// public endpoints, /admin (with the admin token), /metrics and the demo
// endpoints, with the failure lab's HTTP client. It never reads a
// service's tables.
type observer struct {
	lab       *lab.Lab
	instances map[string][]string // service -> its instances ("order", "order-2")
	bus       *Bus                // what waits on the broker (nil: not looked at)

	mu       sync.Mutex
	minAvail map[string]int
	counters map[string]*counter // instance/consumer -> duplicates dropped
	started  map[string][]string // instance -> the start times of its processes seen, in order
}

// urlTarget is a lab.Target that only knows the services' URLs: the chaos
// run publishes nothing and crashes services by signal, not by failpoint.
type urlTarget map[string]string

func (u urlTarget) URL(service string) string { return u[service] }
func (urlTarget) Publish(context.Context, events.Envelope) error {
	return errors.New("the chaos run does not publish")
}
func (urlTarget) PrepareCrash(context.Context, string) error {
	return errors.New("the chaos run crashes services by signal")
}
func (urlTarget) AwaitRestart(context.Context, string) error {
	return errors.New("the chaos run crashes services by signal")
}

// newObserver observes the instances urls names: "order", "inventory",
// "payment" for the first instances, "order-2" and so on for the others.
func newObserver(urls map[string]string, token string) *observer {
	o := &observer{lab: lab.New(urlTarget(urls), token, nil), instances: map[string][]string{}, minAvail: map[string]int{},
		counters: map[string]*counter{}, started: map[string][]string{}}
	for _, svc := range Services {
		o.instances[svc] = instancesOf(urls, svc)
	}
	return o
}

// all lists every instance of every service.
func (o *observer) all() []string {
	var out []string
	for _, svc := range Services {
		out = append(out, o.instances[svc]...)
	}
	return out
}

func (o *observer) ready(ctx context.Context, svc string) bool {
	code, _, err := o.lab.Do(ctx, svc, http.MethodGet, "/readyz", nil, nil, nil)
	return err == nil && code == http.StatusOK
}

// startedAt identifies the running process of a service.
func (o *observer) startedAt(ctx context.Context, svc string) (string, error) {
	var h struct {
		StartedAt string `json:"started_at"`
	}
	err := o.lab.Get(ctx, svc, "/healthz", &h)
	return h.StartedAt, err
}

// waitRestarted waits until a process other than the one started at
// before serves and is ready.
func (o *observer) waitRestarted(ctx context.Context, svc, before string, patience time.Duration) error {
	deadline := time.Now().Add(patience)
	for time.Now().Before(deadline) {
		if s, err := o.startedAt(ctx, svc); err == nil && s != before && o.ready(ctx, svc) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not serve again within %s (is it supervised?)", svc, patience)
}

// waitReady waits until every instance answers /readyz.
func (o *observer) waitReady(ctx context.Context, patience time.Duration) error {
	deadline := time.Now().Add(patience)
	for {
		var down []string
		for _, svc := range o.all() {
			if !o.ready(ctx, svc) {
				down = append(down, svc)
			}
		}
		if len(down) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not ready after %s: %s", patience, strings.Join(down, ", "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stock reads every SKU's stock.
func (o *observer) stock(ctx context.Context) (map[string]Stock, error) {
	var list wire.StockList
	if err := o.lab.Get(ctx, "inventory", "/stock", &list); err != nil {
		return nil, err
	}
	out := map[string]Stock{}
	for _, s := range list.Stock {
		out[s.SKU] = Stock{OnHand: int(s.OnHand), Reserved: int(s.Reserved), Available: int(s.Available)}
	}
	return out, nil
}

// sampleStock records the lowest available stock seen per SKU.
func (o *observer) sampleStock(ctx context.Context) {
	st, err := o.stock(ctx)
	if err != nil {
		return // the inventory may be down: a fault
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for sku, s := range st {
		if low, ok := o.minAvail[sku]; !ok || s.Available < low {
			o.minAvail[sku] = s.Available
		}
	}
}

// receive books a goods receipt, under a key of its own (the endpoint
// wants an Idempotency-Key). ok is false when the answer leaves it unknown
// whether the units were booked.
func (o *observer) receive(ctx context.Context, sku string, n int) (ok bool, err error) {
	code, _, err := o.lab.Do(ctx, "inventory", http.MethodPost, "/stock/"+url.PathEscape(sku)+"/receipts",
		map[string]string{"Idempotency-Key": "chaos-receipt-" + uuid.NewString()}, map[string]int{"quantity": n}, nil)
	switch {
	case err == nil && code == http.StatusOK:
		return true, nil
	case err == nil && code < 500:
		return true, fmt.Errorf("receipt of %d %s refused: %d", n, sku, code)
	case err == nil:
		return false, fmt.Errorf("receipt of %d %s: %d", n, sku, code)
	}
	return false, err
}

// lastOrderID is the newest order's id (0: none).
func (o *observer) lastOrderID(ctx context.Context) (uint64, error) {
	page, err := o.orderPage(ctx, 0, 1)
	if err != nil || len(page) == 0 {
		return 0, err
	}
	return strconv.ParseUint(page[0].ID, 10, 64)
}

func (o *observer) orderPage(ctx context.Context, before uint64, limit int) ([]Order, error) {
	var list wire.OrderList
	path := fmt.Sprintf("/orders?limit=%d", limit)
	if before > 0 {
		path += fmt.Sprintf("&before=%d", before)
	}
	if err := o.lab.Get(ctx, "order", path, &list); err != nil {
		return nil, err
	}
	out := make([]Order, len(list.Orders))
	for i, w := range list.Orders {
		out[i] = Order{ID: w.OrderID, Customer: w.CustomerID, Status: w.Status, StatusReason: w.StatusReason,
			RefundStatus: w.RefundStatus, TotalCents: w.TotalCents, CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt}
	}
	return out, nil
}

// ordersAfter lists every order with an id above after, newest first.
func (o *observer) ordersAfter(ctx context.Context, after uint64) ([]Order, error) {
	var out []Order
	var before uint64
	for {
		page, err := o.orderPage(ctx, before, 500)
		if err != nil {
			return nil, err
		}
		for _, ord := range page {
			id, err := strconv.ParseUint(ord.ID, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("order id %q: %w", ord.ID, err)
			}
			if id <= after {
				return out, nil
			}
			out = append(out, ord)
			before = id
		}
		if len(page) < 500 {
			return out, nil
		}
	}
}

// counter follows a Prometheus counter across process restarts: a value
// lower than the last one means a new process started from zero.
type counter struct {
	last, total float64
	seen        bool
}

func (c *counter) observe(v float64) {
	switch {
	case !c.seen:
		c.seen = true
	case v >= c.last:
		c.total += v - c.last
	default:
		c.total += v
	}
	c.last = v
}

// consumers are the inbox consumer names of each service (the messaging
// contract, docs/contract.md): the label values of the consumer metrics.
var consumers = map[string][]string{
	"order":     {"order"},
	"inventory": {"inventory"},
	"payment":   {"payment", "payment-psp", "payment-refunds"},
}

// sampleMetrics adds what each inbox of each instance dropped as a
// duplicate since the last sample. An instance that is down is skipped
// (its next sample counts).
func (o *observer) sampleMetrics(ctx context.Context) {
	for _, svc := range Services {
		for _, in := range o.instances[svc] {
			for _, name := range consumers[svc] {
				v, err := o.lab.Metric(ctx, in, "consumer_duplicates_suppressed_total", "consumer", name)
				if err != nil {
					break
				}
				o.mu.Lock()
				c := o.counters[in+"/"+name]
				if c == nil {
					c = &counter{}
					o.counters[in+"/"+name] = c
				}
				c.observe(v)
				o.mu.Unlock()
			}
		}
	}
}

// sampleProcesses notes each instance's process, by its start time: a new
// one means the process exited and was started again. An instance that
// does not answer is skipped.
func (o *observer) sampleProcesses(ctx context.Context) {
	for _, in := range o.all() {
		s, err := o.startedAt(ctx, in)
		if err != nil || s == "" {
			continue
		}
		o.mu.Lock()
		if seen := o.started[in]; len(seen) == 0 || seen[len(seen)-1] != s {
			o.started[in] = append(seen, s)
		}
		o.mu.Unlock()
	}
}

// processes is how many processes each instance ran while sampled.
func (o *observer) processes() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]int{}
	for in, seen := range o.started {
		out[in] = len(seen)
	}
	return out
}

// duplicates sums each consumer's duplicates over its service's instances.
func (o *observer) duplicates() map[string]float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]float64{}
	for key, c := range o.counters {
		_, name, _ := strings.Cut(key, "/")
		out[name] += c.total
	}
	return out
}

func (o *observer) lowestAvailable() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.minAvail)
}

// sample runs the stock and metric samplers until ctx ends.
func (o *observer) sample(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for n := 0; ; n++ {
		o.sampleStock(ctx)
		if n%2 == 0 {
			o.sampleMetrics(ctx)
			o.sampleProcesses(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
