package orderdb

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/sqldb"
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

// Event is one of our outbox rows.
type Event struct {
	EventID          string     `db:"event_id" json:"event_id"`
	AggregateVersion uint64     `db:"aggregate_version" json:"aggregate_version"`
	EventType        string     `db:"event_type" json:"event_type"`
	Status           string     `db:"status" json:"status"`
	Attempts         int        `db:"attempts" json:"attempts"`
	NextAttemptAt    time.Time  `db:"next_attempt_at" json:"next_attempt_at"`
	CreatedAt        time.Time  `db:"created_at" json:"created_at"`
	SentAt           *time.Time `db:"sent_at" json:"sent_at"`
}

// Events returns our outbox rows of one order, in version order.
func Events(ctx context.Context, db sqlx.QueryerContext, orderID uint64) ([]Event, error) {
	const q = `SELECT event_id, aggregate_version, event_type, status, attempts, next_attempt_at, created_at, sent_at
FROM outbox_events WHERE aggregate_id = ? ORDER BY aggregate_version, created_at`
	rows := []Event{}
	if err := sqlx.SelectContext(ctx, db, &rows, q, orderID); err != nil {
		return nil, fmt.Errorf("outbox of order %d: %w", orderID, err)
	}
	return rows, nil
}

// Processed is one row of our consumer_inbox.
type Processed struct {
	Consumer    string    `db:"consumer_name"`
	EventID     string    `db:"event_id"`
	ProcessedAt time.Time `db:"processed_at"`
}

// Inbox returns our inbox rows for these event ids.
func Inbox(ctx context.Context, db sqlx.QueryerContext, eventIDs []string) ([]Processed, error) {
	if len(eventIDs) == 0 {
		return nil, nil
	}
	q, args, err := sqlx.In(`SELECT consumer_name, event_id, processed_at FROM consumer_inbox WHERE event_id IN (?)
ORDER BY processed_at`, eventIDs)
	if err != nil {
		return nil, err
	}
	var rows []Processed
	if err := sqlx.SelectContext(ctx, db, &rows, q, args...); err != nil {
		return nil, fmt.Errorf("inbox rows: %w", err)
	}
	return rows, nil
}

// RequeueEvent puts one of our outbox events back to pending, due now,
// keeping its event_id, if its status is one of from; a failed event gets a
// fresh round of attempts. It reports whether it did (false: the event
// moved meanwhile, e.g. a dispatcher claimed it). This is the reconciler's
// re-publish: no new row and no new id, so consumers that already processed
// the event drop the copy by their inbox. Re-sending a 'sent' event
// overwrites its sent_at when it is sent again; the earlier value stays in
// the audit row's evidence.
func RequeueEvent(ctx context.Context, tx *sqlx.Tx, eventID string, from ...string) (bool, error) {
	q, args, err := sqlx.In(`UPDATE outbox_events
SET attempts = IF(status = 'pending', attempts, 0), -- before status changes: SET runs left to right
    status = 'pending', next_attempt_at = NOW(6), claim_token = NULL, lease_until = NULL
WHERE event_id = ? AND status IN (?)`, eventID, from)
	if err != nil {
		return false, err
	}
	res, err := tx.ExecContext(ctx, q, args...)
	return sqldb.Changed(res, err, "requeue event %s", eventID)
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
