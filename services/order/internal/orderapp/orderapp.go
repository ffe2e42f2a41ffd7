// Package orderapp holds the order service's use cases. Each is exactly one
// local transaction through sqldb.WithTx: the order change and the events
// it emits (outbox rows) commit together or not at all. A transaction that
// fails on a broken connection, a deadlock or a lock wait timeout before
// COMMIT runs again (sqldb.WithTxRetry, see txRetry).
package orderapp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/aids/wrongway"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
	"github.com/relmsg/ordersaga/services/order/internal/peerclient"
)

// App is the order service's application layer.
type App struct {
	db      *sqlx.DB
	wake    func() // the outbox dispatcher's Wake: events leave right after commit
	log     *slog.Logger
	cfg     Config
	metrics *metrics

	// createWay picks how a create emits its event (rightCreate; the lab's
	// wrong ways in demo mode, wrongway.go).
	createWay  func() createWay
	publishNow func(ctx context.Context, e events.Envelope) error // the wrong ways' own publish
}

// Config is the order service's business timing and its view of the other
// services. Zero values take the defaults.
type Config struct {
	// Deadlines of the waiting states (order.DefaultDeadlines).
	Deadlines order.Deadlines
	// Reconcile tunes the reconciler.
	Reconcile ReconcileConfig
	// Peers asks inventory and payment over HTTP. Without it the reconciler
	// and the timeline see the order service only.
	Peers *peerclient.Client
	// Registerer receives the order metrics (nil: not registered).
	Registerer prometheus.Registerer
}

// ReconcileConfig tunes the reconciler (see reconcile.go).
type ReconcileConfig struct {
	// Grace: an open order is looked at only after this long without a
	// change (RECONCILE_GRACE). It covers work still in flight and the
	// clock skew between services. Keep it below the participant deadline,
	// or the deadline cancels the order before the reconciler can repair it.
	Grace time.Duration
	// RefundGrace: a cancelled order whose refund is still pending after
	// this long is looked at (RECONCILE_REFUND_GRACE).
	RefundGrace time.Duration
	// Batch bounds the open orders and pending refunds one run looks at
	// (RECONCILE_BATCH).
	Batch int
	// Window: finished orders are compared with the participants' records
	// if they finished within it (RECONCILE_WINDOW); longer than the
	// reservation lease, so that a confirm inventory never applied is
	// found while the stock is still held.
	Window time.Duration
	// FinishedBatch bounds the finished orders one run compares
	// (RECONCILE_FINISHED_BATCH).
	FinishedBatch int
}

// DefaultReconcile is the reconciler's default tuning.
var DefaultReconcile = ReconcileConfig{Grace: time.Minute, RefundGrace: 5 * time.Minute, Batch: 100,
	Window: time.Hour, FinishedBatch: 500}

// New returns the app. wake is called after every commit that wrote events.
func New(db *sqlx.DB, wake func(), log *slog.Logger, cfg Config) *App {
	if cfg.Deadlines.Participant <= 0 {
		cfg.Deadlines.Participant = order.DefaultDeadlines.Participant
	}
	if cfg.Deadlines.Payment <= 0 {
		cfg.Deadlines.Payment = order.DefaultDeadlines.Payment
	}
	if cfg.Deadlines.PaymentMargin <= 0 {
		cfg.Deadlines.PaymentMargin = order.DefaultDeadlines.PaymentMargin
	}
	if cfg.Deadlines.OutcomeWait <= 0 {
		cfg.Deadlines.OutcomeWait = order.DefaultDeadlines.OutcomeWait
	}
	if cfg.Deadlines.Recheck <= 0 {
		cfg.Deadlines.Recheck = order.DefaultDeadlines.Recheck
	}
	if cfg.Reconcile.Grace <= 0 {
		cfg.Reconcile.Grace = DefaultReconcile.Grace
	}
	if cfg.Reconcile.RefundGrace <= 0 {
		cfg.Reconcile.RefundGrace = DefaultReconcile.RefundGrace
	}
	if cfg.Reconcile.Batch <= 0 {
		cfg.Reconcile.Batch = DefaultReconcile.Batch
	}
	if cfg.Reconcile.Window <= 0 {
		cfg.Reconcile.Window = DefaultReconcile.Window
	}
	if cfg.Reconcile.FinishedBatch <= 0 {
		cfg.Reconcile.FinishedBatch = DefaultReconcile.FinishedBatch
	}
	a := &App{db: db, wake: wake, log: log, cfg: cfg, metrics: newMetrics(cfg.Registerer)}
	a.createWay = wrongway.Pick(nil, rightCreate)
	return a
}

// createWay is how a create gets its OrderCreated to inventory: inTx, in
// the order's transaction right after the order row; emit, the history row
// and the event at the transaction's end; afterCommit, once it committed.
type createWay struct {
	inTx        func(ctx context.Context, created events.OrderCreatedV1) error
	emit        emitFunc
	afterCommit func(ctx context.Context, created events.OrderCreatedV1) error
}

// emitFunc writes the history row of a create, and its event if any.
type emitFunc func(ctx context.Context, tx *sqlx.Tx, change orderdb.Change, created events.OrderCreatedV1) error

// rightCreate is the chapter's way: the event is an outbox row of the
// order's own transaction, and the dispatcher sends it.
var rightCreate = createWay{inTx: nothingYet, emit: insertCreated, afterCommit: nothingYet}

func nothingYet(context.Context, events.OrderCreatedV1) error { return nil }

// FailpointCreateAfterCommit is the window between the create's COMMIT and
// the dispatcher's wake-up (or, the wrong way, the publish that follows).
const FailpointCreateAfterCommit = "order.create.after-commit"

func init() {
	failpoint.Register(FailpointCreateAfterCommit, "the order and its OrderCreated outbox row are committed, the dispatcher "+
		"not woken: a crash here leaves the event pending for the dispatcher after the restart "+
		"(the wrong way publish-after-commit loses it)")
}

// Create accepts an order: one transaction inserts the order (its
// idempotency key is unique), its lines and the OrderCreated event. It
// answers "accepted" (pending_inventory), never "succeeded". A retry with
// the same key and the same request returns the existing order and writes
// nothing (created=false); the same key with another request is
// order.ErrIdempotencyConflict.
//
// The common case, a new key, costs seven round trips: the catalogue read
// (with the database clock, the order's creation time) and a six-statement
// transaction. Retries are rare, so the key is not looked up first: the
// unique key rejects the INSERT, and only then is the existing order read
// (the look-up first, a read-back of the order and its lines after COMMIT
// and a read-back of its server-set times made it ten).
func (a *App) Create(ctx context.Context, key string, req order.Request) (o order.Order, created bool, err error) {
	if err := req.Validate(); err != nil {
		return order.Order{}, false, err
	}
	hash := requestHash(req)
	skus := make([]string, len(req.Lines))
	for i, l := range req.Lines {
		skus[i] = l.SKU
	}
	var catalogue map[string]order.Product
	var now time.Time
	err = sqldb.ReadRetry(ctx, a.txRetry(true), func() (err error) {
		catalogue, now, err = orderdb.Catalogue(ctx, a.db, skus)
		return err
	})
	if err != nil {
		return order.Order{}, false, err
	}
	items, total, currency, err := order.Price(req, catalogue)
	if err != nil {
		// A retry of an order accepted before the catalogue changed still
		// gets its order back, not a pricing error.
		if existing, h, gerr := orderdb.GetByKey(ctx, a.db, key); gerr == nil {
			return replay(existing, h, hash)
		}
		return order.Order{}, false, err
	}
	// The order's times come from the database clock read with the
	// catalogue: the deadline sweep compares them with NOW(6), and the
	// answer knows them without reading the row back.
	o = order.Order{CustomerID: req.CustomerID, Status: order.PendingInventory, RefundStatus: order.RefundNone,
		Items: items, TotalCents: total, Currency: currency, Version: 1, CreatedAt: now, UpdatedAt: now}
	if d := a.cfg.Deadlines.For(order.PendingInventory); d > 0 {
		o.DeadlineAt = now.Add(d)
	}

	way := a.createWay() // rightCreate; in demo mode a wrong way while its switch is on (wrongway.go)
	event, err := a.insertOrder(ctx, key, hash, &o, way)
	if errors.Is(err, orderdb.ErrDuplicateKey) {
		// A concurrent request with the same key won the unique key.
		var existing order.Order
		var h string
		gerr := sqldb.ReadRetry(ctx, a.txRetry(true), func() (err error) {
			existing, h, err = orderdb.GetByKey(ctx, a.db, key)
			return err
		})
		if gerr != nil {
			return order.Order{}, false, gerr
		}
		return replay(existing, h, hash)
	}
	if err != nil {
		return order.Order{}, false, fmt.Errorf("create order: %w", err)
	}
	// Window: committed, the dispatcher not woken. A crash here leaves the
	// event pending in the outbox; the dispatcher's poll sends it after the
	// restart (提交后、认领前: dispatcher 后续扫描).
	if err := failpoint.Inject(ctx, FailpointCreateAfterCommit); err != nil {
		return order.Order{}, false, err
	}
	if err := way.afterCommit(ctx, event); err != nil {
		return order.Order{}, false, err
	}
	a.wake()
	a.log.InfoContext(ctx, "order accepted", "order_id", o.ID, "total_cents", total)
	return o, true, nil
}

// insertOrder is the create's transaction: the order and its lines, the
// history row and OrderCreated (way.emit), one COMMIT. Idempotent by the
// key: after a COMMIT with an unknown outcome, the second run either
// inserts the order or finds it (orderdb.ErrDuplicateKey, a replay). It
// sets o.ID and returns the event.
func (a *App) insertOrder(ctx context.Context, key, hash string, o *order.Order, way createWay) (events.OrderCreatedV1, error) {
	var event events.OrderCreatedV1
	err := sqldb.WithTxRetry(ctx, a.db, a.txRetry(true), func(tx *sqlx.Tx) error {
		id, err := orderdb.InsertOrder(ctx, tx, key, hash, *o)
		if err != nil {
			return err
		}
		o.ID = id
		event = events.OrderCreatedV1{OrderID: id, CustomerID: o.CustomerID, Items: eventItems(o.Items),
			TotalCents: o.TotalCents, Currency: o.Currency}
		if err := way.inTx(ctx, event); err != nil {
			return err
		}
		// Window: the order row exists in the transaction, its event not
		// yet. An error or crash here must leave neither (atomic commit).
		if err := failpoint.Inject(ctx, "order.create.after-order-insert"); err != nil {
			return err
		}
		if err := orderdb.InsertItems(ctx, tx, id, o.Items); err != nil {
			return err
		}
		// The history row goes before the outbox row, so that the
		// timeline shows the order before its event.
		change := orderdb.Change{OrderID: id, To: string(order.PendingInventory), RefundStatus: string(order.RefundNone),
			Trigger: TriggerCreated, Actor: ActorAPI}
		return way.emit(ctx, tx, change, event)
	})
	return event, err
}

// txRetry is how the use cases retry their transaction
// (sqldb.WithTxRetry): after a transient failure before COMMIT always,
// after a COMMIT whose outcome is unknown only when the use case is
// idempotent: a create and a cancel (their idempotency keys), the deadline
// sweep (it re-checks the deadline under the row lock). Consumers retry
// through the broker instead (pkg/inbox), and the reconciler's repairs
// through its next run.
func (a *App) txRetry(idempotent bool) sqldb.TxRetry {
	return sqldb.TxRetry{Idempotent: idempotent, Log: a.log}
}

// leaseLost reports a one-at-a-time job (the reconciler, the deadline
// sweep) that found its database lease lost and stopped: from here on
// another run may hold it, and this one changes nothing more.
func (a *App) leaseLost(ctx context.Context, log *slog.Logger, job string, err error) {
	a.metrics.leaseLost.WithLabelValues(job).Inc()
	log.ErrorContext(ctx, "lease lost: run stopped before its next change; another run may hold the lease now",
		"lease", job, "err", err)
}

// insertCreated writes the history row that emits OrderCreated, then the
// event itself.
func insertCreated(ctx context.Context, tx *sqlx.Tx, change orderdb.Change, created events.OrderCreatedV1) error {
	eventID, err := outbox.NewEventID()
	if err != nil {
		return err
	}
	change.EmittedEventID = &eventID
	if err := orderdb.InsertChange(ctx, tx, change); err != nil {
		return err
	}
	_, err = outbox.Add(ctx, tx, outbox.Event{
		EventID: eventID, AggregateID: created.OrderID, AggregateVersion: 1, Type: events.OrderCreated, Payload: created,
	})
	return err
}

func replay(existing order.Order, storedHash, hash string) (order.Order, bool, error) {
	if storedHash != hash {
		return order.Order{}, false, order.ErrIdempotencyConflict
	}
	return existing, false, nil
}

// requestHash identifies a request independent of line order.
func requestHash(r order.Request) string {
	lines := append([]order.Line(nil), r.Lines...)
	sort.Slice(lines, func(i, j int) bool { return lines[i].SKU < lines[j].SKU })
	b, _ := json.Marshal(struct {
		C string
		L []order.Line
	}{r.CustomerID, lines})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func eventItems(items []order.Item) []events.Item {
	out := make([]events.Item, len(items))
	for i, it := range items {
		out[i] = events.Item{SKU: it.SKU, Quantity: it.Quantity, UnitPriceCents: it.UnitPriceCents}
	}
	return out
}

// Get returns one order.
func (a *App) Get(ctx context.Context, id uint64) (order.Order, error) {
	return read(ctx, a, func() (order.Order, error) { return orderdb.Get(ctx, a.db, id) })
}

// List returns orders, newest first.
func (a *App) List(ctx context.Context, status order.Status, beforeID uint64, limit int) ([]order.Order, error) {
	return read(ctx, a, func() ([]order.Order, error) { return orderdb.List(ctx, a.db, status, beforeID, limit) })
}

// read runs fn, a read, again after a transient error (a killed session:
// sqldb.ReadRetry with the app's retry), and returns what it read.
func read[T any](ctx context.Context, a *App, fn func() (T, error)) (T, error) {
	var v T
	err := sqldb.ReadRetry(ctx, a.txRetry(true), func() (err error) {
		v, err = fn()
		return err
	})
	return v, err
}
