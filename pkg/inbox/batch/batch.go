package batch

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/failpoint"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/sqldb"
	"github.com/relmsg/ordersaga/pkg/tracing"
)

// Handler applies one event through a service's store S: the same
// function runs in the chapter's one-event transaction (Direct) and in a
// batch's (Config.Open).
type Handler[S any] func(ctx context.Context, s S, e events.Envelope) error

// ExternalHandler is inbox.ExternalHandler written against S: the call
// outside any transaction, then the Handler that records its outcome.
type ExternalHandler[S any] func(ctx context.Context, e events.Envelope) (Handler[S], error)

// Handlers are a consumer's handlers, written once against a service's
// store S, and the two ways to open S: over the chapter's one-event
// transaction (Direct) and over a batch's (Batched, once per batch).
type Handlers[S any] struct {
	Direct   func(tx *sqlx.Tx) S
	Batched  func(b *Tx) S
	Plain    map[events.Type]Handler[S]
	External map[events.Type]ExternalHandler[S]
}

// Options tune the batch layer.
type Options struct {
	// Timeout bounds each piece of work on its own: one external call, the
	// batch transaction, one delivery sent down the chapter's path
	// [30 s, rabbit.ConsumeConfig's HandlerTimeout].
	Timeout time.Duration
	Metrics *Metrics // nil: not exported
}

// Consumer is the batch layer of one consumer: its HandleBatch is the
// rabbit.BatchHandler when CONSUMER_BATCH > 1.
type Consumer[S any] struct {
	inbox *inbox.Consumer // the chapter's: every delivery the batch does not take, every fallback
	in    inbox.Config    // its configuration, defaults filled in
	hs    Handlers[S]
	opt   Options
}

// New makes the chapter's consumer of cfg, running hs one event per
// transaction (its Handlers and External are made from hs with Direct),
// and the batch layer over it, running the same hs over Batched.
func New[S any](cfg inbox.Config, hs Handlers[S], opt Options) (*inbox.Consumer, *Consumer[S]) {
	if hs.Direct == nil || hs.Batched == nil {
		panic("batch: a consumer needs both ways to open its store")
	}
	cfg.Handlers = Direct(hs.Direct, hs.Plain)
	cfg.External = DirectExternal(hs.Direct, hs.External)
	c := inbox.NewConsumer(cfg)
	if opt.Timeout <= 0 {
		opt.Timeout = 30 * time.Second
	}
	if opt.Metrics == nil {
		opt.Metrics = NewMetrics(nil)
	}
	in := c.Config()
	opt.Metrics.start(in.Name)
	return c, &Consumer[S]{inbox: c, in: in, hs: hs, opt: opt}
}

// Direct makes the chapter's inbox handlers of handlers written against a
// store: open gives the store over the inbox transaction of one event.
func Direct[S any](open func(tx *sqlx.Tx) S, hs map[events.Type]Handler[S]) map[events.Type]inbox.Handler {
	out := make(map[events.Type]inbox.Handler, len(hs))
	for t, h := range hs {
		out[t] = func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error { return h(ctx, open(tx), e) }
	}
	return out
}

// DirectExternal is Direct for external handlers.
func DirectExternal[S any](open func(tx *sqlx.Tx) S, hs map[events.Type]ExternalHandler[S]) map[events.Type]inbox.ExternalHandler {
	out := make(map[events.Type]inbox.ExternalHandler, len(hs))
	for t, ext := range hs {
		out[t] = func(ctx context.Context, e events.Envelope) (inbox.Handler, error) {
			h, err := ext(ctx, e)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error { return h(ctx, open(tx), e) }, nil
		}
	}
	return out
}

// item is one delivery taken into a run.
type item[S any] struct {
	index int
	d     rabbit.Delivery
	e     events.Envelope
	h     Handler[S]         // nil for an external event until its call is made
	ext   ExternalHandler[S] // the event's external call, if it has one
	trace string             // the producer's trace, continued (pkg/tracing)
}

// HandleBatch is the rabbit.BatchHandler: it cuts ds into runs (doc.go),
// commits each run in one transaction or sends it down the chapter's path,
// and returns one decision per delivery. A panic in this layer decides
// every delivery not decided yet as a failed attempt (retried later).
func (c *Consumer[S]) HandleBatch(ctx context.Context, ds []rabbit.Delivery) []rabbit.Decision {
	ts := takes{decisions: make([]rabbit.Decision, len(ds)), decided: make([]bool, len(ds))}
	defer func() {
		if p := recover(); p != nil {
			c.in.Log.Error("batch layer panicked; undecided deliveries are retried later",
				"consumer", c.in.Name, "panic", p, "stack", string(debug.Stack()))
			for i, d := range ds {
				if !ts.decided[i] {
					ts.decide(i, c.inbox.Decide(ctx, d, fmt.Errorf("%w: %v", inbox.ErrPanic, p)))
				}
			}
		}
	}()
	var run []item[S]
	flush := func() { c.run(ctx, run, &ts); run = nil }
	for i, d := range ds {
		c.inbox.Arrived(d)
		it, ok := c.item(i, d)
		switch {
		case !ok || copyIn(run, it):
			flush()
			ts.decide(i, c.alone(ctx, d))
		case callsOnSameAggregate(run, it):
			flush()
			run = append(run, it)
		default:
			run = append(run, it)
		}
	}
	flush()
	return ts.decisions
}

// takes are the decisions of one take of deliveries, and which are made.
type takes struct {
	decisions []rabbit.Decision
	decided   []bool
}

func (t *takes) decide(i int, d rabbit.Decision) { t.decisions[i], t.decided[i] = d, true }

// item says whether d can share a transaction and makes its item: a valid,
// current state-transition event seen for the first time, with a handler,
// inside the replay window. Everything else takes the chapter's path,
// which knows every outcome.
func (c *Consumer[S]) item(i int, d rabbit.Delivery) (item[S], bool) {
	if d.Redelivered || d.Attempt > 1 {
		return item[S]{}, false
	}
	e, err := d.Envelope()
	if err != nil || events.CheckVersion(e.Type, e.SchemaVersion) != nil || events.StrategyOf(e.Type) != events.StateTransition {
		return item[S]{}, false
	}
	if since := d.KnownSince(); !since.IsZero() && time.Since(since) > c.in.ReplayWindow {
		return item[S]{}, false
	}
	it := item[S]{index: i, d: d, e: e, trace: tracing.Child(e.Traceparent)}
	if ext, ok := c.hs.External[e.Type]; ok { // as the inbox: the external call wins
		it.ext = ext
		return it, true
	}
	h, ok := c.hs.Plain[e.Type]
	it.h = h
	return it, ok
}

// copyIn: the run has this event already (a copy of one message).
func copyIn[S any](run []item[S], it item[S]) bool {
	for _, r := range run {
		if r.e.EventID == it.e.EventID {
			return true
		}
	}
	return false
}

// callsOnSameAggregate: the run has an event of it's aggregate and one of
// the two calls out; its call must see what the other one's record wrote.
func callsOnSameAggregate[S any](run []item[S], it item[S]) bool {
	for _, r := range run {
		if r.e.AggregateID == it.e.AggregateID && (r.ext != nil || it.ext != nil) {
			return true
		}
	}
	return false
}

// alone sends d down the chapter's path, with a time bound of its own.
func (c *Consumer[S]) alone(ctx context.Context, d rabbit.Delivery) rabbit.Decision {
	ctx, cancel := context.WithTimeout(ctx, c.opt.Timeout)
	defer cancel()
	return c.inbox.HandleArrived(ctx, d)
}

// run processes one run: a run of one down the chapter's path; a longer
// one makes its external calls, then commits its events in one
// transaction, or, if that fails, sends each down the chapter's path.
func (c *Consumer[S]) run(ctx context.Context, run []item[S], ts *takes) {
	if len(run) < 2 {
		for _, it := range run {
			ts.decide(it.index, c.alone(ctx, it.d))
		}
		return
	}
	run, later := c.callOut(ctx, run, ts)
	if len(run) > 0 {
		b, err := c.transact(ctx, run)
		if err == nil {
			c.committed(ctx, b, run, ts)
		} else {
			c.opt.Metrics.fallbacks.WithLabelValues(c.in.Name).Inc()
			c.in.Log.Info("batch rolled back; its deliveries go one at a time", "consumer", c.in.Name,
				"events", len(run), "err", err)
			for _, it := range run {
				ts.decide(it.index, c.alone(ctx, it.d))
			}
		}
	}
	for _, it := range later {
		ts.decide(it.index, c.alone(ctx, it.d))
	}
}

// committed decides a committed run: each delivery as the chapter's path
// decides a committed event (counted, then acked), the run's held log
// lines written, the dispatcher woken once.
func (c *Consumer[S]) committed(ctx context.Context, b *Tx, run []item[S], ts *takes) {
	m := c.opt.Metrics
	m.batches.WithLabelValues(c.in.Name).Inc()
	m.events.WithLabelValues(c.in.Name).Add(float64(len(run)))
	b.writeLog()
	if c.in.AfterCommit != nil {
		c.in.AfterCommit()
	}
	abandon := false
	for _, it := range run {
		// Window: committed, not acked. A crash here redelivers every
		// message of the run; their inbox rows make them duplicates.
		d := c.inbox.Decide(tracing.With(ctx, it.trace), it.d, nil)
		abandon = abandon || d.Abandoned()
		ts.decide(it.index, d)
	}
	if abandon { // the failpoint of that window: no delivery of the run is acked
		for _, it := range run {
			ts.decide(it.index, rabbit.Abandon("inbox.after-commit-before-ack"))
		}
	}
}

// transact commits run in one transaction (doc.go), bounded by Timeout.
// A panic of a handler is an error here: the transaction has rolled back.
func (c *Consumer[S]) transact(ctx context.Context, run []item[S]) (b *Tx, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.opt.Timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			c.in.Log.Error("handler panicked in a batch; the batch is rolled back", "consumer", c.in.Name,
				"panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("%w: %v", inbox.ErrPanic, p)
		}
	}()
	b = &Tx{events: make([]events.Envelope, len(run))}
	for i, it := range run {
		b.events[i] = it.e
	}
	err = sqldb.WithTx(ctx, c.in.DB, func(tx *sqlx.Tx) error {
		b.Tx = tx
		if err := inbox.ClaimAll(ctx, tx, c.in.Name, b.events); err != nil {
			return err
		}
		if err := failpoint.Inject(ctx, "inbox.after-claim"); err != nil {
			return err
		}
		s := c.hs.Batched(b)
		for i, it := range run {
			b.current = i
			if err := it.h(tracing.With(ctx, it.trace), s, it.e); err != nil {
				return fmt.Errorf("event %s (%s): %w", it.e.EventID, it.e.Type, err)
			}
		}
		for _, f := range b.before {
			if err := f(ctx); err != nil {
				return err
			}
		}
		if _, err := outbox.Add(ctx, tx, b.emitted...); err != nil {
			return err
		}
		return failpoint.Inject(ctx, "inbox.after-effect-before-commit")
	})
	return b, err
}

// callOut makes the external calls of a run's events, as the chapter's
// path makes them for one event (inbox.Consumer's handler), and returns
// the items that go into the transaction and those that go down the
// chapter's path after it; a delivery in neither is decided:
//
//   - an event this consumer has already committed (one read for all, as
//     inbox.Seen for one) is not called: the chapter's path finds the
//     duplicate or the mismatch;
//   - the calls run concurrently, each with its own time bound: each waits
//     on the network, and the external system is idempotent by key;
//   - a call that fails is decided at once (retry later, dead letter), as
//     the chapter's path decides it, and does not hold its neighbours back.
func (c *Consumer[S]) callOut(ctx context.Context, run []item[S], ts *takes) (kept, later []item[S]) {
	var ids []string
	for _, it := range run {
		if it.ext != nil {
			ids = append(ids, it.e.EventID)
		}
	}
	if len(ids) == 0 {
		return run, nil
	}
	known, readErr := inbox.Committed(ctx, c.in.DB, c.in.Name, ids)
	errs := make([]error, len(run))
	done := make(chan struct{})
	calls := 0
	for i := range run {
		it := &run[i]
		if it.ext == nil {
			continue
		}
		if readErr != nil || known[it.e.EventID] {
			errs[i] = errLater
			continue
		}
		calls++
		go func() {
			defer func() { done <- struct{}{} }()
			it.h, errs[i] = c.call(ctx, it)
		}()
	}
	for ; calls > 0; calls-- {
		<-done
	}
	for i, it := range run {
		switch {
		case errs[i] == nil:
			kept = append(kept, it)
		case errors.Is(errs[i], errLater):
			later = append(later, it)
		default:
			ts.decide(it.index, c.inbox.Decide(tracing.With(ctx, it.trace), it.d, errs[i]))
		}
	}
	return kept, later
}

// errLater sends a delivery of a run down the chapter's path after it.
var errLater = errors.New("processed on its own")

// call makes one external call with its own time bound; a panic is a
// failed call.
func (c *Consumer[S]) call(ctx context.Context, it *item[S]) (h Handler[S], err error) {
	ctx, cancel := context.WithTimeout(tracing.With(ctx, it.trace), c.opt.Timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			c.in.Log.Error("external call panicked", "consumer", c.in.Name, "event_id", it.e.EventID,
				"panic", p, "stack", string(debug.Stack()))
			h, err = nil, fmt.Errorf("%w: %v", inbox.ErrPanic, p)
		}
	}()
	return it.ext(ctx, it.e)
}
