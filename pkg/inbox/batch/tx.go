package batch

import (
	"context"
	"log/slog"

	"github.com/jmoiron/sqlx"
	"go.opentelemetry.io/otel/trace"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/outbox"
)

// Tx is one batch's transaction as the handlers of its events see it,
// through their service's store (Config.Open): the transaction itself, and
// the writes that wait for the batch's end.
type Tx struct {
	*sqlx.Tx
	events  []events.Envelope // the batch's events, in delivery order
	current int               // the index in events of the handler running
	emitted []outbox.Event
	before  []func(ctx context.Context) error
	shared  map[any]any
	held    []heldRecord
}

// Emit keeps result events of the handler running; every handler's go into
// the outbox in one INSERT after the shared writes, before COMMIT. Each
// keeps the span of the message that caused it (ctx's: the delivery's
// process span), which its create span continues.
func (b *Tx) Emit(ctx context.Context, evs ...outbox.Event) {
	for _, e := range evs {
		if !e.Parent.IsValid() {
			e.Parent = trace.SpanContextFromContext(ctx)
		}
		b.emitted = append(b.emitted, e)
	}
}

// BeforeCommit registers a shared write: f runs once, after the last
// handler and before the outbox INSERT, in the order of registration. An
// error of f rolls the whole batch back, like a handler's.
func (b *Tx) BeforeCommit(f func(ctx context.Context) error) {
	b.before = append(b.before, f)
}

// Share returns the batch's value under key, made by mk on first use: what
// the handlers of one batch share (a service's store, rows read once).
func Share[T any](b *Tx, key any, mk func() T) T {
	if v, ok := b.shared[key]; ok {
		return v.(T)
	}
	v := mk()
	if b.shared == nil {
		b.shared = map[any]any{}
	}
	b.shared[key] = v
	return v
}

// LockOnce is how a handler in a batch reads, locked, the one row its event
// decides on (the row of the event's aggregate): the first such call reads
// the rows of every aggregate of the batch with all (one locking read, in
// key order, so two batches never lock the same rows in opposite orders),
// and the row is handed to the first event of its aggregate. Every other
// read goes to one, which reads the row as it is now: a later event of the
// same aggregate, after the earlier one's change; a row the batch read did
// not find (inserted by a handler since). A handler changes only its own
// aggregate's rows, so a row handed out is the row one would read.
func LockOnce[T any](b *Tx, key any, id uint64,
	all func(ids []uint64) (map[uint64]T, error), one func(id uint64) (T, error)) (T, error) {
	if id != b.events[b.current].AggregateID || !b.firstOfAggregate(b.current) {
		return one(id)
	}
	rows := Share(b, key, func() *lockedRows[T] { return &lockedRows[T]{} })
	if rows.m == nil {
		m, err := all(b.aggregates())
		if err != nil {
			var zero T
			return zero, err
		}
		rows.m = m
	}
	row, ok := rows.m[id]
	if !ok {
		return one(id)
	}
	delete(rows.m, id) // handed out: its change makes this copy stale
	return row, nil
}

// lockedRows holds the rows of one batch read until each is handed out.
type lockedRows[T any] struct{ m map[uint64]T }

func (b *Tx) firstOfAggregate(i int) bool {
	for _, e := range b.events[:i] {
		if e.AggregateID == b.events[i].AggregateID {
			return false
		}
	}
	return true
}

// aggregates are the batch's aggregate ids, each once.
func (b *Tx) aggregates() []uint64 {
	seen := make(map[uint64]bool, len(b.events))
	ids := make([]uint64, 0, len(b.events))
	for _, e := range b.events {
		if !seen[e.AggregateID] {
			seen[e.AggregateID] = true
			ids = append(ids, e.AggregateID)
		}
	}
	return ids
}

// Log returns l for a handler in the batch: its lines are held until the
// batch commits, then written, and dropped if it rolls back (the chapter's
// path then writes its own).
func (b *Tx) Log(l *slog.Logger) *slog.Logger {
	return slog.New(holdHandler{inner: l.Handler(), b: b})
}

// heldRecord is a log line waiting for the batch's COMMIT.
type heldRecord struct {
	h   slog.Handler
	ctx context.Context
	r   slog.Record
}

// writeLog writes the held lines, once the batch has committed.
func (b *Tx) writeLog() {
	for _, h := range b.held {
		_ = h.h.Handle(h.ctx, h.r)
	}
	b.held = nil
}

type holdHandler struct {
	inner slog.Handler
	b     *Tx
}

func (h holdHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

func (h holdHandler) Handle(ctx context.Context, r slog.Record) error {
	h.b.held = append(h.b.held, heldRecord{h: h.inner, ctx: ctx, r: r.Clone()})
	return nil
}

func (h holdHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return holdHandler{inner: h.inner.WithAttrs(as), b: h.b}
}

func (h holdHandler) WithGroup(name string) slog.Handler {
	return holdHandler{inner: h.inner.WithGroup(name), b: h.b}
}
