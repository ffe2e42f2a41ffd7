package orderdb

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/instance"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/services/order/internal/order"
)

// Change is one row of order_history: a creation (From "") or a move.
type Change struct {
	ID             uint64    `db:"id"`
	OrderID        uint64    `db:"order_id"`
	From           string    `db:"from_status"`
	To             string    `db:"to_status"`
	RefundStatus   string    `db:"refund_status"`
	Trigger        string    `db:"trigger_name"`
	Actor          string    `db:"actor"`
	Reason         string    `db:"reason"`
	EventID        *string   `db:"event_id"`
	EmittedEventID *string   `db:"emitted_event_id"`
	RepairID       *string   `db:"repair_id"`
	Instance       *string   `db:"instance"` // INSTANCE_ID of the instance that made it (set from ctx)
	ChangedAt      time.Time `db:"changed_at"`
}

// InsertChange records a change of an order, in the transaction that makes
// it. Empty ids are stored as NULL.
func InsertChange(ctx context.Context, tx *sqlx.Tx, c Change) error {
	return InsertChanges(ctx, tx, []Change{c})
}

// InsertChanges records several changes in one statement (a consumer
// batch's, pkg/inbox), in the transaction that makes them. Their ids, and
// so History's order, follow cs. Like InsertChange, the instance is the
// one ctx names.
func InsertChanges(ctx context.Context, tx *sqlx.Tx, cs []Change) error {
	if len(cs) == 0 {
		return nil
	}
	const q = `INSERT INTO order_history
  (order_id, from_status, to_status, refund_status, trigger_name, actor, reason, event_id, emitted_event_id, repair_id, instance)
VALUES `
	const row = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, ''))`
	inst := instance.ID(ctx)
	args := make([]any, 0, 11*len(cs))
	for _, c := range cs {
		args = append(args, c.OrderID, c.From, c.To, c.RefundStatus, c.Trigger, c.Actor, clip(c.Reason, 255),
			c.EventID, c.EmittedEventID, c.RepairID, inst)
	}
	if _, err := tx.ExecContext(ctx, q+sqldb.Values(row, len(cs)), args...); err != nil {
		if len(cs) == 1 {
			return fmt.Errorf("order %d history: %w", cs[0].OrderID, err)
		}
		return fmt.Errorf("history of %d changes: %w", len(cs), err)
	}
	return nil
}

// History returns an order's changes, oldest first.
func History(ctx context.Context, db sqlx.QueryerContext, orderID uint64) ([]Change, error) {
	const q = `SELECT id, order_id, from_status, to_status, refund_status, trigger_name, actor, reason,
  event_id, emitted_event_id, repair_id, instance, changed_at
FROM order_history WHERE order_id = ? ORDER BY id`
	rows := []Change{}
	if err := sqlx.SelectContext(ctx, db, &rows, q, orderID); err != nil {
		return nil, fmt.Errorf("order %d history: %w", orderID, err)
	}
	return rows, nil
}

// Due is an order whose deadline has passed, as the sweep read it.
type Due struct {
	ID     uint64 `db:"id"`
	Status string `db:"status"`
	// WaitedMicros is how long the order has been in its status (since
	// updated_at, set by the move into it; database time).
	WaitedMicros int64 `db:"waited_micros"`
}

// Waited is how long the order has been in its status.
func (d Due) Waited() time.Duration { return time.Duration(d.WaitedMicros) * time.Microsecond }

// PastDeadline returns up to limit orders whose deadline has passed
// (database time), earliest deadline first. It takes no lock: the sweep
// re-checks each one under its row lock (LockPastDeadline).
func PastDeadline(ctx context.Context, db sqlx.QueryerContext, limit int) ([]Due, error) {
	const q = `SELECT id, status, TIMESTAMPDIFF(MICROSECOND, updated_at, NOW(6)) AS waited_micros
FROM orders WHERE deadline_at <= NOW(6) ORDER BY deadline_at LIMIT ?`
	due := []Due{}
	if err := sqlx.SelectContext(ctx, db, &due, q, limit); err != nil {
		return nil, fmt.Errorf("orders past their deadline: %w", err)
	}
	return due, nil
}

// PostponeDeadline moves the passed deadline of an order still in status
// to by from now: the sweep asked a participant and decided to wait.
// Compare-and-set on the status and the deadline having passed; false: the
// order moved meanwhile (a result arrived). updated_at is left alone: it
// still says when the order entered the status, which bounds the wait.
func PostponeDeadline(ctx context.Context, db sqlx.ExecerContext, id uint64, status order.Status, by time.Duration) (bool, error) {
	const q = `UPDATE orders SET deadline_at = TIMESTAMPADD(MICROSECOND, ?, NOW(6))
WHERE id = ? AND status = ? AND deadline_at <= NOW(6)`
	res, err := db.ExecContext(ctx, q, by.Microseconds(), id, status)
	return sqldb.Changed(res, err, "postpone the deadline of order %d", id)
}

// LockPastDeadline locks order id if, now, its deadline has passed and no
// other transaction holds it. ok is false when the order moved (its deadline
// was cleared or moved on) or is locked by someone else (another sweeper, or
// a consumer applying a result right now): SKIP LOCKED, so a sweeper never
// waits behind a row another worker is deciding; the next round sees the
// outcome.
func LockPastDeadline(ctx context.Context, tx *sqlx.Tx, id uint64) (o order.Order, ok bool, err error) {
	const q = `SELECT ` + orderColumns + ` FROM orders
WHERE id = ? AND deadline_at <= NOW(6)
FOR UPDATE SKIP LOCKED`
	var rows []orderRow
	if err := tx.SelectContext(ctx, &rows, q, id); err != nil {
		return order.Order{}, false, fmt.Errorf("lock order %d past its deadline: %w", id, err)
	}
	if len(rows) == 0 {
		return order.Order{}, false, nil
	}
	return rows[0].domain(), true, nil
}

// Upcoming lists open orders by deadline, earliest first (the operator's
// view of the timer table).
func Upcoming(ctx context.Context, db sqlx.QueryerContext, limit int) ([]order.Order, error) {
	const q = `SELECT ` + orderColumns + ` FROM orders WHERE deadline_at IS NOT NULL ORDER BY deadline_at LIMIT ?`
	var rows []orderRow
	if err := sqlx.SelectContext(ctx, db, &rows, q, limit); err != nil {
		return nil, fmt.Errorf("orders by deadline: %w", err)
	}
	out := make([]order.Order, len(rows))
	for i, r := range rows {
		out[i] = r.domain()
	}
	return out, nil
}

// Gauges are the order metrics read at scrape time.
type Gauges struct {
	OldestOpen   map[order.Status]float64 // age in seconds of the oldest order per open status
	PastDeadline int64                    // open orders whose deadline passed and that are not cancelled yet
	// NeedsAttention: finished orders the reconciler parked for an operator.
	NeedsAttention int64
}

// ReadGauges reads the scrape-time metrics in three indexed queries.
func ReadGauges(ctx context.Context, db sqlx.QueryerContext) (Gauges, error) {
	const qOldest = `SELECT status, TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6)) AS micros
FROM orders WHERE status IN ('pending_inventory', 'awaiting_payment') GROUP BY status`
	var rows []struct {
		Status string `db:"status"`
		Micros int64  `db:"micros"`
	}
	if err := sqlx.SelectContext(ctx, db, &rows, qOldest); err != nil {
		return Gauges{}, fmt.Errorf("oldest open orders: %w", err)
	}
	g := Gauges{OldestOpen: map[order.Status]float64{}}
	for _, r := range rows {
		g.OldestOpen[order.Status(r.Status)] = float64(r.Micros) / 1e6
	}
	const qPast = `SELECT COUNT(*) FROM orders WHERE deadline_at <= NOW(6)`
	if err := sqlx.GetContext(ctx, db, &g.PastDeadline, qPast); err != nil {
		return Gauges{}, fmt.Errorf("orders past their deadline: %w", err)
	}
	const qAttention = `SELECT COUNT(*) FROM reconciliation_checks WHERE result = 'needs_attention'`
	if err := sqlx.GetContext(ctx, db, &g.NeedsAttention, qAttention); err != nil {
		return Gauges{}, fmt.Errorf("orders parked by the reconciler: %w", err)
	}
	return g, nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary.
	for n > 0 && (s[n]&0xC0) == 0x80 {
		n--
	}
	return s[:n]
}
