package paymentdb

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/sqldb"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
)

// Step is the table of one PSP step: a charge (payments) or a refund
// (refunds). A row of either is open while its outcome at the PSP is not
// known, and both tables keep the same columns for that: attempts and
// last_error (the evidence of failed attempts), next_attempt_at and
// sweep_rounds (the sweep's schedule), deadline_at, parked_at and
// parked_reason. The statements below serve both; the table name in them
// is one of the two constants here, never input.
type Step struct {
	table  string // payments, refunds
	noun   string // payment, refund: in errors
	open   string // the status of a row waiting on the PSP
	parked string // the status of a row waiting on an operator
}

// The two steps.
var (
	Charges = Step{table: "payments", noun: "payment", open: string(payment.Pending), parked: string(payment.NeedsAttention)}
	Refunds = Step{table: "refunds", noun: "refund", open: string(payment.RefundRequested), parked: string(payment.RefundNeedsAttention)}
)

// NoteFailure adds one failed attempt to the evidence of an open row:
// attempts+1 and the error. One statement, no transaction: it runs where
// the attempt failed, outside any.
func (s Step) NoteFailure(ctx context.Context, db sqlx.ExecerContext, orderID uint64, msg string) error {
	q := `UPDATE ` + s.table + ` SET attempts = attempts + 1, last_error = ?, updated_at = NOW(6)
WHERE order_id = ? AND status = ?`
	if _, err := db.ExecContext(ctx, q, payment.Clip(msg, 1024), orderID, s.open); err != nil {
		return fmt.Errorf("note failure on %s %d: %w", s.noun, orderID, err)
	}
	return nil
}

// Unpark puts a parked row back to open for another round: a new deadline
// from now, the sweep's backoff restarted and its first look after grace.
// The evidence (attempts, last error, parked reason) stays.
func (s Step) Unpark(ctx context.Context, tx *sqlx.Tx, orderID uint64, deadline, grace time.Duration) (bool, error) {
	q := `UPDATE ` + s.table + ` SET status = ?, deadline_at = TIMESTAMPADD(MICROSECOND, ?, NOW(6)),
  next_attempt_at = TIMESTAMPADD(MICROSECOND, ?, NOW(6)), sweep_rounds = 0, parked_at = NULL, updated_at = NOW(6)
WHERE order_id = ? AND status = ?`
	res, err := tx.ExecContext(ctx, q, s.open, deadline.Microseconds(), grace.Microseconds(), orderID, s.parked)
	return sqldb.Changed(res, err, "retry %s %d", s.noun, orderID)
}

// NewRequest records that a new request of the step was written (the
// sweep's or an operator's re-request, a correction of the request before
// it): its event_id becomes the one the next request corrects. Under the
// row lock the caller holds.
func (s Step) NewRequest(ctx context.Context, tx *sqlx.Tx, orderID uint64, eventID string) error {
	q := `UPDATE ` + s.table + ` SET request_event_id = ? WHERE order_id = ?`
	res, err := tx.ExecContext(ctx, q, eventID, orderID)
	ok, err := sqldb.Changed(res, err, "note the request of %s %d", s.noun, orderID)
	if err == nil && !ok {
		err = fmt.Errorf("note the request of %s %d: no such row", s.noun, orderID)
	}
	return err
}

// Due is a row the sweep claimed: which order, and whether its deadline
// had passed when it was claimed (database time).
type Due struct {
	OrderID      uint64 `db:"order_id"`
	Rounds       int    `db:"sweep_rounds"`
	PastDeadline bool   `db:"past_deadline"`
}

// SelectDue returns up to limit open rows whose next sweep round is due,
// locking them; rows another sweep holds are skipped (SKIP LOCKED), so
// concurrent sweeps take disjoint rows. Run it in the short claim
// transaction, followed by Reschedule for each row.
func (s Step) SelectDue(ctx context.Context, tx *sqlx.Tx, limit int) ([]Due, error) {
	q := `SELECT order_id, sweep_rounds, deadline_at <= NOW(6) AS past_deadline FROM ` + s.table + `
WHERE status = ? AND next_attempt_at <= NOW(6)
ORDER BY next_attempt_at LIMIT ? FOR UPDATE SKIP LOCKED`
	var due []Due
	if err := tx.SelectContext(ctx, &due, q, s.open, limit); err != nil {
		return nil, fmt.Errorf("select due %s: %w", s.table, err)
	}
	return due, nil
}

// Reschedule claims a due row for this round: one more round, and the
// next one not before delay from now. Compare-and-set on "still open and
// still due", so a row claimed meanwhile is not claimed twice (false).
// Once committed, no other sweep sees the row as due until then.
func (s Step) Reschedule(ctx context.Context, tx *sqlx.Tx, orderID uint64, delay time.Duration) (bool, error) {
	q := `UPDATE ` + s.table + ` SET sweep_rounds = sweep_rounds + 1,
  next_attempt_at = TIMESTAMPADD(MICROSECOND, ?, NOW(6))
WHERE order_id = ? AND status = ? AND next_attempt_at <= NOW(6)`
	res, err := tx.ExecContext(ctx, q, delay.Microseconds(), orderID, s.open)
	return sqldb.Changed(res, err, "reschedule %s %d", s.noun, orderID)
}
