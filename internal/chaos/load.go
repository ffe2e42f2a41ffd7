package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/base/wire"
)

// loader sends the planned requests as a client would: each key's first
// POST at its time (open loop: never waiting for earlier answers), a
// request whose answer is unknown (no answer, 5xx) is asked again with the
// same key and body until it gets a definite one, then the kind's
// follow-up: a cancel, replays, a conflicting body.
type loader struct {
	obs   *observer
	tag   string
	start time.Time
	// settle is when retries of unknown answers give up.
	settle time.Time

	mu     sync.Mutex
	reqs   []*Request
	next   int            // the index of the next extra request's key, after the plan's
	extras sync.WaitGroup // extra requests still being followed
}

// retryWait is the client's backoff between tries of one request.
var retryWait = retry.Backoff{Base: 250 * time.Millisecond, Cap: 4 * time.Second}

// run sends every planned request and its follow-ups; it returns when all
// of them are done (or settle has passed). waves are released by the
// caller's wave function, which books the scarce SKU's supply first.
func (d *loader) run(ctx context.Context, p Plan, wave func(ctx context.Context, w int)) {
	var wg sync.WaitGroup
	// At most this many keys in progress, each with its follow-ups: far
	// above what the rates here need, a bound if the stack stops answering.
	slots := make(chan struct{}, 512)
	released := map[int]bool{}
	for i, pr := range p.Requests {
		if wait := time.Until(d.start.Add(pr.At)); wait > 0 {
			select {
			case <-ctx.Done():
				wg.Wait()
				return
			case <-time.After(wait):
			}
		}
		if pr.Kind == KindScarce && !released[pr.Wave] {
			released[pr.Wave] = true
			wave(ctx, pr.Wave)
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		r := &Request{Key: Key(d.tag, i), Kind: pr.Kind, Customer: Customer(d.tag, i, pr.Kind), Items: pr.Items, Sent: time.Now()}
		d.mu.Lock()
		d.reqs = append(d.reqs, r)
		d.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			d.follow(ctx, pr, r)
		}()
	}
	wg.Wait()
}

// extra sends one request beyond the plan, as the load sends each, and
// follows it: a cancel of one unit of SKU-1 three seconds after it was
// accepted, so that its order goes through every consumer of the stack
// (reserved, charged and confirmed, then cancelled, refunded and
// restocked, when the saga is quick enough). A fault that needs traffic
// (copy-take, the node kill of a retry tier's leader, the outage) asks for
// some while it waits, the load still on or over. The checks see it as any
// other key.
func (d *loader) extra(ctx context.Context) {
	d.mu.Lock()
	i := d.next
	d.next++
	pr := PlannedRequest{Index: i, Kind: KindCancel, Items: []Line{{SKU: "SKU-1", Quantity: 1}}, CancelAfter: 3 * time.Second}
	r := &Request{Key: Key(d.tag, i), Kind: pr.Kind, Customer: Customer(d.tag, i, pr.Kind), Items: pr.Items, Sent: time.Now()}
	d.reqs = append(d.reqs, r)
	d.mu.Unlock()
	d.extras.Go(func() { d.follow(ctx, pr, r) })
}

// traffic sends an extra request every 700 ms until stop is called.
func (d *loader) traffic(parent context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(parent)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			d.extra(parent) // followed to the end: stop ends the sending only
			select {
			case <-ctx.Done():
				return
			case <-time.After(700 * time.Millisecond):
			}
		}
	}()
	return func() { cancel(); <-done }
}

// requests returns the ledger; call it once run has returned and the
// extra requests are followed (extras.Wait).
func (d *loader) requests() []Request {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Request, len(d.reqs))
	for i, r := range d.reqs {
		out[i] = *r
	}
	return out
}

func (d *loader) record(r *Request, list *[]Answer, a Answer) {
	d.mu.Lock()
	*list = append(*list, a)
	d.mu.Unlock()
}

func (d *loader) follow(ctx context.Context, pr PlannedRequest, r *Request) {
	body := map[string]any{"customer_id": r.Customer, "items": r.Items}
	var copies sync.WaitGroup
	for range pr.Concurrent { // replays racing the first POST
		copies.Add(1)
		go func() { defer copies.Done(); d.settleCreate(ctx, r, &r.Creates, body) }()
	}
	first := d.settleCreate(ctx, r, &r.Creates, body)
	copies.Wait()
	if first.Status != http.StatusAccepted {
		return
	}
	switch pr.Kind {
	case KindCancel:
		if !sleep(ctx, pr.CancelAfter) {
			return
		}
		d.settleCancel(ctx, r, first.OrderID)
	case KindReplay:
		if sleep(ctx, pr.Later) {
			d.settleCreate(ctx, r, &r.Creates, body)
		}
	case KindConflict:
		if sleep(ctx, pr.Later) {
			d.settleCreate(ctx, r, &r.Conflicts, map[string]any{"customer_id": r.Customer, "items": conflicting(r.Items)})
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool { return d <= 0 || retry.Wait(ctx, d) }

// settleCreate POSTs body with the request's key until the answer is
// definite, recording every answer in list.
func (d *loader) settleCreate(ctx context.Context, r *Request, list *[]Answer, body any) Answer {
	var a Answer
	for try := 1; ; try++ {
		a = d.create(ctx, r.Key, body)
		d.record(r, list, a)
		if a.Definite() || !d.again(ctx, try) {
			return a
		}
	}
}

func (d *loader) settleCancel(ctx context.Context, r *Request, orderID string) {
	for try := 1; ; try++ {
		a := d.cancel(ctx, r.Key+"-cancel", orderID)
		d.record(r, &r.Cancels, a)
		if a.Definite() || !d.again(ctx, try) {
			return
		}
	}
}

// again waits before the next try and reports whether there is one.
func (d *loader) again(ctx context.Context, try int) bool {
	wait := retryWait.Delay(try)
	if time.Now().Add(wait).After(d.settle) {
		return false
	}
	return retry.Wait(ctx, wait)
}

func (d *loader) create(ctx context.Context, key string, body any) Answer {
	var out wire.Order
	at := time.Since(d.start)
	code, hdr, err := d.obs.lab.Do(ctx, "order", http.MethodPost, "/orders", map[string]string{"Idempotency-Key": key}, body, &out)
	a := Answer{At: at, Status: code}
	if err != nil {
		a.Status, a.Error = 0, classify(err)
		return a
	}
	a.OrderID, a.Total = out.OrderID, out.TotalCents
	a.Replayed = hdr.Get("Idempotent-Replayed") == "true"
	return a
}

func (d *loader) cancel(ctx context.Context, key, orderID string) Answer {
	var out wire.CancelResult
	at := time.Since(d.start)
	code, _, err := d.obs.lab.Do(ctx, "order", http.MethodPost, "/orders/"+orderID+"/cancel", map[string]string{"Idempotency-Key": key},
		map[string]string{"reason": "chaos run: the client cancels"}, &out)
	a := Answer{At: at, Status: code, OrderID: orderID, Result: out.Result}
	if err != nil {
		a.Status, a.Error = 0, classify(err)
	}
	return a
}

// classify names a transport failure for the report.
func classify(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "interrupted"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	}
	return fmt.Sprintf("transport: %v", err)
}
