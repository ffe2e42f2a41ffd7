package orderdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/instance"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
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
	AuditSeq     uint32     `db:"audit_seq"`  // the number of its latest audit row when scanned (0: none)
}

// qAuditSeq is a candidate's latest audit row number, read with the scan:
// a repair numbers its row one more (see InsertAudit).
const qAuditSeq = `(SELECT COALESCE(MAX(a.audit_seq), 0) FROM reconciliation_audit a WHERE a.order_id = o.id) AS audit_seq`

// ReconcileCandidates returns up to limit orders that should have moved on
// by now, least recently changed first: open (pending_inventory,
// awaiting_payment) and unchanged for longer than grace, and cancelled with
// a refund pending for longer than refundGrace. "Now" and updated_at are
// both the order database's clock, so clock skew between services does not
// enter the choice; the grace covers work still in flight.
func ReconcileCandidates(ctx context.Context, db sqlx.QueryerContext, grace, refundGrace time.Duration, limit int) ([]Candidate, error) {
	const qOpen = `SELECT o.id, o.status, o.refund_status, o.aggregate_version, o.updated_at, o.deadline_at,
  TIMESTAMPDIFF(MICROSECOND, o.updated_at, NOW(6)) AS age_micros, ` + qAuditSeq + `
FROM orders o
WHERE o.status IN ('pending_inventory', 'awaiting_payment')
  AND o.updated_at < TIMESTAMPADD(MICROSECOND, -?, NOW(6))
ORDER BY o.updated_at LIMIT ?`
	const qRefund = `SELECT o.id, o.status, o.refund_status, o.aggregate_version, o.updated_at, o.deadline_at,
  TIMESTAMPDIFF(MICROSECOND, o.updated_at, NOW(6)) AS age_micros, ` + qAuditSeq + `
FROM orders o
WHERE o.refund_status = 'pending' AND o.status = 'cancelled'
  AND o.updated_at < TIMESTAMPADD(MICROSECOND, -?, NOW(6))
ORDER BY o.updated_at LIMIT ?`
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

// FinishedCandidates returns up to limit finished orders (confirmed,
// rejected, cancelled without a refund pending: that one is
// ReconcileCandidates') that changed within window but longer than grace
// ago, and that no check has closed or parked as they are now, least
// recently changed first. The grace covers the participants' work still
// in flight after the order finished (a release, a refund, a payment
// settling) and the clock skew between services; "now" and updated_at are
// the order database's clock. An order found consistent is not returned
// again unless it changes (a cancel after confirm).
func FinishedCandidates(ctx context.Context, db sqlx.QueryerContext, grace, window time.Duration, limit int) ([]Candidate, error) {
	const q = `SELECT o.id, o.status, o.refund_status, o.aggregate_version, o.updated_at, o.deadline_at,
  TIMESTAMPDIFF(MICROSECOND, o.updated_at, NOW(6)) AS age_micros, ` + qAuditSeq + `
FROM orders o
LEFT JOIN reconciliation_checks c ON c.order_id = o.id AND c.order_updated_at = o.updated_at
WHERE o.status IN ('confirmed', 'rejected', 'cancelled') AND o.refund_status <> 'pending'
  AND o.updated_at >= TIMESTAMPADD(MICROSECOND, -?, NOW(6))
  AND o.updated_at < TIMESTAMPADD(MICROSECOND, -?, NOW(6))
  AND c.order_id IS NULL
ORDER BY o.updated_at LIMIT ?`
	out := []Candidate{}
	if err := sqlx.SelectContext(ctx, db, &out, q, window.Microseconds(), grace.Microseconds(), limit); err != nil {
		return nil, fmt.Errorf("reconcile: finished orders: %w", err)
	}
	return out, nil
}

// Finished reports whether the candidate is a finished order (for
// FinishedCandidates), as opposed to an open one or a refund pending.
func (c Candidate) Finished() bool {
	return order.Status(c.Status).Terminal() && c.RefundStatus != string(order.RefundPending)
}

// The results of a check of a finished order (reconciliation_checks.result).
const (
	CheckConsistent     = "consistent"      // every participant agrees: closed
	CheckNeedsAttention = "needs_attention" // reported for an operator (repair_id)
)

// RecordCheck records what the reconciler concluded about a finished
// order as it was (updatedAt): consistent, or needs_attention with the
// audit row that says why. A later check of the same order replaces it.
func RecordCheck(ctx context.Context, db sqlx.ExecerContext, orderID uint64, updatedAt time.Time, result, repairID string) error {
	const q = `INSERT INTO reconciliation_checks (order_id, order_updated_at, result, repair_id) VALUES (?, ?, ?, ?)
ON DUPLICATE KEY UPDATE order_updated_at = VALUES(order_updated_at), result = VALUES(result),
  repair_id = VALUES(repair_id), checked_at = NOW(6)`
	var rid any
	if repairID != "" {
		rid = repairID
	}
	if _, err := db.ExecContext(ctx, q, orderID, updatedAt, result, rid); err != nil {
		return fmt.Errorf("record the check of order %d: %w", orderID, err)
	}
	return nil
}

// RepairsSince counts the repairs made for an order since a time (its
// audit rows with outcome repaired): how many times an entry point was
// used on a finished order without closing it.
func RepairsSince(ctx context.Context, db sqlx.QueryerContext, orderID uint64, since time.Time) (int, error) {
	const q = `SELECT COUNT(*) FROM reconciliation_audit WHERE order_id = ? AND outcome = 'repaired' AND created_at >= ?`
	var n int
	if err := sqlx.GetContext(ctx, db, &n, q, orderID, since); err != nil {
		return 0, fmt.Errorf("repairs of order %d: %w", orderID, err)
	}
	return n, nil
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
	Seq            uint32          `db:"audit_seq" json:"-"` // the order's n-th audit row: see InsertAudit
	Classification string          `db:"classification" json:"classification"`
	Action         string          `db:"action" json:"action"`
	Outcome        string          `db:"outcome" json:"outcome"`
	Detail         string          `db:"detail" json:"detail"`
	Evidence       json.RawMessage `db:"evidence" json:"evidence"`
	Instance       *string         `db:"instance" json:"instance"` // INSTANCE_ID of the reconciler's instance (set from ctx)
	CreatedAt      time.Time       `db:"created_at" json:"created_at"`
}

// ErrAuditExists: the order already has its audit row number a.Seq:
// another run audited the same finding first.
var ErrAuditExists = errors.New("another run audited this finding")

// InsertAudit writes an audit row; with a transaction, in the repair's own.
// a.Seq is one more than the candidate's AuditSeq: the row that follows
// what the scan saw. Two runs that scanned the order at the same point of
// its audit trail (a run that lost its lease and the run that took it
// over) number their rows alike, and the key (order_id, audit_seq) lets
// one in: the other gets ErrAuditExists, and its repair rolls back with
// it. A later run scans the first's row and writes the next number.
func InsertAudit(ctx context.Context, db sqlx.ExecerContext, a Audit) error {
	const q = `INSERT INTO reconciliation_audit
  (repair_id, run_id, order_id, audit_seq, classification, action, outcome, detail, evidence, instance)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, ''))`
	_, err := db.ExecContext(ctx, q, a.RepairID, a.RunID, a.OrderID, a.Seq, a.Classification, a.Action, a.Outcome,
		clip(a.Detail, 1000), []byte(a.Evidence), instance.ID(ctx))
	switch {
	case sqldb.IsDuplicateKey(err):
		// repair_id is a fresh UUID: the key that collides is the finding's.
		return fmt.Errorf("audit row %d of order %d: %w", a.Seq, a.OrderID, ErrAuditExists)
	case err != nil:
		return fmt.Errorf("audit row for order %d: %w", a.OrderID, err)
	}
	return nil
}

// Reported returns the repair id of an order's report row with this
// classification, if it has one ("" otherwise), so a finding nobody can
// repair automatically is reported once, not on every run.
func Reported(ctx context.Context, db sqlx.QueryerContext, orderID uint64, classification string) (string, error) {
	const q = `SELECT repair_id FROM reconciliation_audit
WHERE order_id = ? AND classification = ? AND action = 'report' AND outcome = 'reported'
ORDER BY created_at LIMIT 1`
	var ids []string
	if err := sqlx.SelectContext(ctx, db, &ids, q, orderID, classification); err != nil {
		return "", fmt.Errorf("reported before: %w", err)
	}
	if len(ids) == 0 {
		return "", nil
	}
	return ids[0], nil
}

// Audits returns audit rows, newest first; orderID 0 means every order.
func Audits(ctx context.Context, db sqlx.QueryerContext, orderID uint64, limit int) ([]Audit, error) {
	q := `SELECT repair_id, run_id, order_id, classification, action, outcome, detail, evidence, instance, created_at
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
