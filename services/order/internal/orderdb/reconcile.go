package orderdb

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/services/order/internal/order"
)

// Candidate is an order the reconciler looks at, as it was when the scan
// read it. The repair compares the order with it again under the row lock.
type Candidate struct {
	ID           uint64     `db:"id"`
	Status       string     `db:"status"`
	RefundStatus string     `db:"refund_status"`
	Version      uint64     `db:"aggregate_version"`
	UpdatedAt    time.Time  `db:"updated_at"`
	DeadlineAt   *time.Time `db:"deadline_at"`
	AgeMicros    int64      `db:"age_micros"` // since the last change, database time
}

// ReconcileCandidates returns up to limit orders that should have moved on
// by now, least recently changed first: open (pending_inventory,
// awaiting_payment) and unchanged for longer than grace, and cancelled with
// a refund pending for longer than refundGrace. "Now" and updated_at are
// both the order database's clock, so clock skew between services does not
// enter the choice; the grace covers work still in flight.
func ReconcileCandidates(ctx context.Context, db sqlx.QueryerContext, grace, refundGrace time.Duration, limit int) ([]Candidate, error) {
	const qOpen = `SELECT id, status, refund_status, aggregate_version, updated_at, deadline_at,
  TIMESTAMPDIFF(MICROSECOND, updated_at, NOW(6)) AS age_micros
FROM orders
WHERE status IN ('pending_inventory', 'awaiting_payment')
  AND updated_at < TIMESTAMPADD(MICROSECOND, -?, NOW(6))
ORDER BY updated_at LIMIT ?`
	const qRefund = `SELECT id, status, refund_status, aggregate_version, updated_at, deadline_at,
  TIMESTAMPDIFF(MICROSECOND, updated_at, NOW(6)) AS age_micros
FROM orders
WHERE refund_status = 'pending' AND status = 'cancelled'
  AND updated_at < TIMESTAMPADD(MICROSECOND, -?, NOW(6))
ORDER BY updated_at LIMIT ?`
	open := []Candidate{}
	if err := sqlx.SelectContext(ctx, db, &open, qOpen, grace.Microseconds(), limit); err != nil {
		return nil, fmt.Errorf("reconcile: open orders: %w", err)
	}
	if len(open) >= limit {
		return open, nil
	}
	var refunds []Candidate
	if err := sqlx.SelectContext(ctx, db, &refunds, qRefund, refundGrace.Microseconds(), limit-len(open)); err != nil {
		return nil, fmt.Errorf("reconcile: pending refunds: %w", err)
	}
	return append(open, refunds...), nil
}

// Same reports whether the locked order o is still what the scan saw.
func (c Candidate) Same(o order.Order) bool {
	return string(o.Status) == c.Status && string(o.RefundStatus) == c.RefundStatus && o.UpdatedAt.Equal(c.UpdatedAt)
}

// Audit is one row of reconciliation_audit.
type Audit struct {
	RepairID       string          `db:"repair_id" json:"repair_id"`
	RunID          string          `db:"run_id" json:"run_id"`
	OrderID        uint64          `db:"order_id" json:"order_id,string"`
	Classification string          `db:"classification" json:"classification"`
	Action         string          `db:"action" json:"action"`
	Outcome        string          `db:"outcome" json:"outcome"`
	Detail         string          `db:"detail" json:"detail"`
	Evidence       json.RawMessage `db:"evidence" json:"evidence"`
	CreatedAt      time.Time       `db:"created_at" json:"created_at"`
}

// InsertAudit writes an audit row; with a transaction, in the repair's own.
func InsertAudit(ctx context.Context, db sqlx.ExecerContext, a Audit) error {
	const q = `INSERT INTO reconciliation_audit
  (repair_id, run_id, order_id, classification, action, outcome, detail, evidence)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
	_, err := db.ExecContext(ctx, q, a.RepairID, a.RunID, a.OrderID, a.Classification, a.Action, a.Outcome,
		clip(a.Detail, 1000), []byte(a.Evidence))
	if err != nil {
		return fmt.Errorf("audit row for order %d: %w", a.OrderID, err)
	}
	return nil
}

// Reported reports whether an order already has a report row with this
// classification, so a finding nobody can repair automatically is reported
// once, not on every run.
func Reported(ctx context.Context, db sqlx.QueryerContext, orderID uint64, classification string) (bool, error) {
	const q = `SELECT EXISTS (SELECT 1 FROM reconciliation_audit
WHERE order_id = ? AND classification = ? AND action = 'report' AND outcome = 'reported')`
	var ok bool
	if err := sqlx.GetContext(ctx, db, &ok, q, orderID, classification); err != nil {
		return false, fmt.Errorf("reported before: %w", err)
	}
	return ok, nil
}

// Audits returns audit rows, newest first; orderID 0 means every order.
func Audits(ctx context.Context, db sqlx.QueryerContext, orderID uint64, limit int) ([]Audit, error) {
	q := `SELECT repair_id, run_id, order_id, classification, action, outcome, detail, evidence, created_at
FROM reconciliation_audit`
	var args []any
	if orderID != 0 {
		q += ` WHERE order_id = ?`
		args = append(args, orderID)
	}
	q += ` ORDER BY created_at DESC, repair_id LIMIT ?`
	args = append(args, limit)
	rows := []Audit{}
	if err := sqlx.SelectContext(ctx, db, &rows, q, args...); err != nil {
		return nil, fmt.Errorf("audit rows: %w", err)
	}
	return rows, nil
}
