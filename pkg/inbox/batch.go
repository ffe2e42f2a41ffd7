package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/failpoint"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/sqldb"
	"github.com/relmsg/ordersaga/pkg/tracing"
	"github.com/relmsg/ordersaga/pkg/wrongway"
)

// HandleBatch is the rabbit.BatchHandler of this consumer (CONSUMER_BATCH >
// 1): the deliveries that were already waiting, processed in one
// transaction when they can be, one at a time (Handle) when not.
//
// The batch transaction is the chapter's transaction for several events:
//
//	BEGIN
//	  INSERT consumer_inbox, one row per event (one statement)
//	  each event's handler, in delivery order (business change + outbox.Add)
//	  the handlers' shared work (Shared), e.g. inventory's stock rows
//	  the outbox INSERT of every result event (one statement, outbox.Collect)
//	COMMIT
//	ACK each delivery                        (only after COMMIT)
//
// Each event's inbox row still commits with its effect and result events,
// and only an inbox primary-key duplicate still means "already processed":
// if anything fails in the batch (a duplicate key, a handler error, a
// deadlock, a failpoint), the whole batch rolls back and every delivery of
// it is processed again on its own, by Handle, which gives each its own
// outcome. Deliveries that need more than the plain path (an invalid or too
// old message, a delta or snapshot event, a second copy of an event already
// in the batch, any wrong-way switch) go to Handle directly, after the
// batch.
//
// Events with an ExternalHandler (a PSP call) join the batch after their
// call, made as Handle makes it, before any transaction (callExternals):
// only the records of the outcomes share the transaction. If the batch
// then rolls back, the one-at-a-time path calls again with the same key,
// which the external system answers the same way (ExternalHandler).
func (c *Consumer) HandleBatch(ctx context.Context, ds []rabbit.Delivery) []rabbit.Decision {
	decisions := make([]rabbit.Decision, len(ds))
	var batch []batchItem
	var alone []int // indices handled one at a time, after the batch
	seen := make(map[string]bool, len(ds))
	for i, d := range ds {
		c.count(d)
		it, ok := c.batchable(ctx, d)
		if !ok || seen[it.e.EventID] || len(ds) == 1 {
			alone = append(alone, i)
			continue
		}
		seen[it.e.EventID] = true
		it.index = i
		batch = append(batch, it)
	}
	if len(batch) > 1 {
		var known []int
		batch, known = c.callExternals(ctx, batch, ds, decisions)
		alone = append(known, alone...)
	}
	switch {
	case len(batch) == 0:
	case len(batch) == 1 && batch[0].ext == nil:
		alone = append([]int{batch[0].index}, alone...)
	default: // also one event whose external call is made: recorded, not called again
		if err := c.processBatch(ctx, batch); err != nil {
			c.cfg.Metrics.batchFallbacks.WithLabelValues(c.cfg.Name).Inc()
			c.cfg.Log.Info("batch rolled back; processing its deliveries one at a time",
				"consumer", c.cfg.Name, "events", len(batch), "err", err)
			for _, it := range batch {
				alone = append(alone, it.index)
			}
			break
		}
		// Window: committed, not acked. A crash here redelivers every
		// message of the batch; their inbox rows turn them into duplicates.
		dec := rabbit.Ack()
		if err := failpoint.Inject(ctx, "inbox.after-commit-before-ack"); err != nil {
			dec = rabbit.Abandon(err.Error())
		}
		for _, it := range batch {
			decisions[it.index] = dec
		}
	}
	for _, i := range alone {
		decisions[i] = c.handle(ctx, ds[i])
	}
	return decisions
}

// batchItem is one delivery taken into a batch.
type batchItem struct {
	index int
	e     events.Envelope
	h     Handler         // nil until callExternals has called ext
	ext   ExternalHandler // the event's external call, if it has one
	ctx   context.Context // carries the event's trace
	log   *slog.Logger
}

// batchable says whether d can share a transaction: a valid, current
// state-transition event with a Handler or an ExternalHandler, inside the
// replay window. Everything else takes the one-at-a-time path, which knows
// every outcome.
func (c *Consumer) batchable(ctx context.Context, d rabbit.Delivery) (batchItem, bool) {
	w := c.cfg.WrongWay
	if w.On(wrongway.AckBeforeCommit) || w.On(wrongway.NoInbox) || w.On(wrongway.DedupeOwnTx) {
		return batchItem{}, false
	}
	e, err := d.Envelope()
	if err != nil || events.CheckVersion(e.Type, e.SchemaVersion) != nil || events.StrategyOf(e.Type) != events.StateTransition {
		return batchItem{}, false
	}
	if since := d.KnownSince(); !since.IsZero() && time.Since(since) > c.cfg.ReplayWindow {
		return batchItem{}, false
	}
	h, plain := c.cfg.Handlers[e.Type]
	ext, external := c.cfg.External[e.Type]
	if !plain && !external {
		return batchItem{}, false
	}
	tp := tracing.Child(e.Traceparent)
	log := c.cfg.Log.With("consumer", c.cfg.Name, "event_id", d.MessageId, "event_type", d.Type,
		"order_id", e.AggregateID, "attempt", d.Attempt, "trace_id", tracing.TraceID(tp))
	it := batchItem{e: e, h: h, ctx: tracing.With(ctx, tp), log: log}
	if external { // as in handler: the external call wins
		it.h, it.ext = nil, ext
	}
	return it, true
}

// callExternals makes the external calls of a batch's events, as handler
// does for one event, and returns the items that go on into the batch
// transaction, each with the Handler that records its outcome, and the
// indices of the deliveries that go to the one-at-a-time path; a delivery
// in neither is decided (in decisions):
//
//   - an event this consumer has already committed (one read for all, as
//     Seen for one) is not called: Handle finds the duplicate or the
//     mismatch;
//   - the calls run concurrently, since each waits on the network and the
//     external system is idempotent by key; no transaction is open;
//   - a call that fails is decided at once (retry later, dead letter), as
//     Handle would decide it, and does not hold its neighbours back.
func (c *Consumer) callExternals(ctx context.Context, batch []batchItem, ds []rabbit.Delivery,
	decisions []rabbit.Decision) (kept []batchItem, alone []int) {
	var ids []string
	for _, it := range batch {
		if it.ext != nil {
			ids = append(ids, it.e.EventID)
		}
	}
	if len(ids) == 0 {
		return batch, nil
	}
	known, err := committed(ctx, c.cfg.DB, c.cfg.Name, ids)
	errs := make([]error, len(batch))
	var wg sync.WaitGroup
	for i := range batch {
		it := &batch[i]
		switch {
		case it.ext == nil:
			continue
		case err != nil || known[it.e.EventID]:
			errs[i] = errAlone
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			it.h, errs[i] = it.ext(it.ctx, it.e)
		}()
	}
	wg.Wait()
	for i, it := range batch {
		switch {
		case errs[i] == nil:
			kept = append(kept, it)
		case errors.Is(errs[i], errAlone):
			alone = append(alone, it.index)
		default:
			decisions[it.index] = c.decision(it.ctx, it.log, ds[it.index], it.e, errs[i])
		}
	}
	return kept, alone
}

// errAlone sends a delivery of a batch to the one-at-a-time path.
var errAlone = errors.New("processed on its own")

// processBatch commits the batch's events in one transaction, or rolls all
// of them back and returns the first error.
func (c *Consumer) processBatch(ctx context.Context, batch []batchItem) error {
	envs := make([]events.Envelope, len(batch))
	for i, it := range batch {
		envs[i] = it.e
	}
	err := sqldb.WithTx(ctx, c.cfg.DB, func(tx *sqlx.Tx) error {
		if err := claimAll(ctx, tx, c.cfg.Name, envs); err != nil {
			return err
		}
		if err := failpoint.Inject(ctx, "inbox.after-claim"); err != nil {
			return err
		}
		sh := &shared{events: envs}
		// The handlers' result events are kept and written together, in
		// one INSERT before the COMMIT.
		collected := outbox.Collect(tx)
		for _, it := range batch {
			hctx := collected.Context(context.WithValue(it.ctx, sharedKey{}, sh))
			if err := it.h(hctx, tx, it.e); err != nil {
				return fmt.Errorf("event %s (%s): %w", it.e.EventID, it.e.Type, err)
			}
		}
		for _, f := range sh.finishers {
			if err := f.Finish(ctx, tx); err != nil {
				return err
			}
		}
		if err := collected.Flush(ctx); err != nil {
			return err
		}
		return failpoint.Inject(ctx, "inbox.after-effect-before-commit")
	})
	if err != nil {
		return err
	}
	m := c.cfg.Metrics
	m.batches.WithLabelValues(c.cfg.Name).Inc()
	m.batchedEvents.WithLabelValues(c.cfg.Name).Add(float64(len(batch)))
	m.processed.WithLabelValues(c.cfg.Name).Add(float64(len(batch)))
	for _, it := range batch {
		it.log.Debug("event processed", "batch", len(batch))
	}
	if c.cfg.AfterCommit != nil {
		c.cfg.AfterCommit()
	}
	return nil
}

// claimAll inserts the inbox rows of several events in one statement. Any
// error, a duplicate key included, fails the whole batch: which event was
// already processed is for the one-at-a-time path to find out (claim).
func claimAll(ctx context.Context, tx *sqlx.Tx, consumer string, es []events.Envelope) error {
	rows := make([]claimRow, len(es))
	for i, e := range es {
		rows[i] = claimRow{e.EventID, e.Payload}
		if rows[i].payload == nil {
			rows[i].payload = []byte{} // as ClaimPayload: an empty body has a hash too
		}
	}
	if err := insertClaims(ctx, tx, consumer, rows); err != nil {
		return fmt.Errorf("inbox claim of %d events for %s: %w", len(es), consumer, err)
	}
	return nil
}

// A Finisher is work that the handlers of one batch share and that runs
// once, after the last handler, before COMMIT: a service that changes the
// same rows for many events (inventory's stock rows) collects the changes
// and makes them once per row, in a fixed order.
type Finisher interface {
	Finish(ctx context.Context, tx *sqlx.Tx) error
}

// Shared returns the current batch's Finisher under key, made by mk on
// first use. ok is false when the handler runs alone (no batch, or the
// one-at-a-time path after a batch failed): it then does the work itself.
// An error of Finish rolls the whole batch back, like a handler's.
func Shared(ctx context.Context, key any, mk func() Finisher) (f Finisher, ok bool) {
	sh, _ := ctx.Value(sharedKey{}).(*shared)
	if sh == nil {
		return nil, false
	}
	if f, ok := sh.byKey[key]; ok {
		return f, true
	}
	f = mk()
	if sh.byKey == nil {
		sh.byKey = map[any]Finisher{}
	}
	sh.byKey[key] = f
	sh.finishers = append(sh.finishers, f)
	return f, true
}

// LockOnce is how a handler reads the one row its event changes, locked,
// when batches are common: alone (no batch) it is one(id); in a batch the
// first call reads the rows of every event of the batch with all, given
// their aggregate ids (one locking read, in key order, so that two batches
// never lock the same rows in opposite orders), and each call then takes
// its row from that read, once. A second event of the batch for the same
// row, or a row the read did not find, reads with one(id), after the
// changes made before it. key names the kind of row, as for Shared.
func LockOnce[T any](ctx context.Context, key any, id uint64,
	all func(ids []uint64) (map[uint64]T, error), one func(id uint64) (T, error)) (T, error) {
	f, ok := Shared(ctx, key, func() Finisher { return &lockedRows[T]{} })
	if !ok {
		return one(id)
	}
	l := f.(*lockedRows[T])
	if !l.read {
		sh := ctx.Value(sharedKey{}).(*shared)
		ids := make([]uint64, len(sh.events))
		for i, e := range sh.events {
			ids[i] = e.AggregateID
		}
		rows, err := all(ids)
		if err != nil {
			var zero T
			return zero, err
		}
		l.rows, l.read = rows, true
	}
	row, ok := l.rows[id]
	if !ok {
		return one(id)
	}
	delete(l.rows, id) // taken: the handler's change makes this copy stale
	return row, nil
}

// lockedRows holds a batch's rows from their one read until each is taken.
type lockedRows[T any] struct {
	rows map[uint64]T
	read bool
}

// Finish: the locks end with the batch's transaction; nothing to write.
func (*lockedRows[T]) Finish(context.Context, *sqlx.Tx) error { return nil }

type sharedKey struct{}

// shared is what one batch's handlers share (Shared, LockOnce).
type shared struct {
	events    []events.Envelope
	byKey     map[any]Finisher
	finishers []Finisher // in order of first use
}
