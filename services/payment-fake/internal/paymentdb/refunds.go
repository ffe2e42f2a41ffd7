package paymentdb

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
)

// ErrNoRefund: the order has no refund.
var ErrNoRefund = errors.New("refund not found")

// ErrRefundExists: the order has a refund already.
var ErrRefundExists = errors.New("refund for this order exists")

type refundRow struct {
	stepRow
	PSPChargeID string         `db:"psp_charge_id"`
	PSPRefundID sql.NullString `db:"psp_refund_id"`
	Reason      string         `db:"reason"`
	DeadlineAt  time.Time      `db:"deadline_at"`
}

const refundColumns = `order_id, idempotency_key, psp_charge_id, amount_cents, status, psp_refund_id, reason,
  deadline_at, attempts, last_error, parked_reason, request_event_id, created_at, updated_at`

func (r refundRow) domain() payment.Refund {
	return payment.Refund{
		OrderID: r.OrderID, IdempotencyKey: r.IdempotencyKey, PSPChargeID: r.PSPChargeID,
		AmountCents: r.AmountCents, Status: payment.RefundStatus(r.Status), PSPRefundID: r.PSPRefundID.String,
		Reason: r.Reason, DeadlineAt: r.DeadlineAt, Attempts: r.Attempts, LastError: r.LastError,
		ParkedReason: r.ParkedReason, RequestEventID: r.RequestEventID.String, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

// InsertRefund records a requested refund, due within deadline and first
// looked at by the sweep after grace (database time), with the event_id of
// its request. ErrRefundExists: the
// order has one already (one refund per order, by primary key).
func InsertRefund(ctx context.Context, tx *sqlx.Tx, f payment.Refund, deadline, grace time.Duration) error {
	const q = `INSERT INTO refunds
  (order_id, idempotency_key, psp_charge_id, amount_cents, status, reason, deadline_at, next_attempt_at,
   request_event_id)
VALUES (?, ?, ?, ?, ?, ?, TIMESTAMPADD(MICROSECOND, ?, NOW(6)), TIMESTAMPADD(MICROSECOND, ?, NOW(6)), NULLIF(?, ''))`
	return insertOnce(ctx, tx, ErrRefundExists, "insert refund", f.OrderID, q, f.OrderID, f.IdempotencyKey, f.PSPChargeID,
		f.AmountCents, f.Status, f.Reason, deadline.Microseconds(), grace.Microseconds(), f.RequestEventID)
}

// GetRefund returns an order's refund, or ErrNoRefund.
func GetRefund(ctx context.Context, db sqlx.QueryerContext, orderID uint64) (payment.Refund, error) {
	const q = `SELECT ` + refundColumns + ` FROM refunds WHERE order_id = ?`
	return getRow[refundRow](ctx, db, q, orderID, ErrNoRefund, "get refund")
}

// LockRefund reads an order's refund and locks it. Lock the payment first.
func LockRefund(ctx context.Context, tx *sqlx.Tx, orderID uint64) (payment.Refund, error) {
	const q = `SELECT ` + refundColumns + ` FROM refunds WHERE order_id = ? FOR UPDATE`
	return getRow[refundRow](ctx, tx, q, orderID, ErrNoRefund, "lock refund")
}

// RefundDone records the PSP's refund: compare-and-set on the status read.
func RefundDone(ctx context.Context, tx *sqlx.Tx, orderID uint64, from payment.RefundStatus, pspRefundID string) (bool, error) {
	const q = `UPDATE refunds SET status = ?, psp_refund_id = ?, next_attempt_at = NOW(6), updated_at = NOW(6)
WHERE order_id = ? AND status = ?`
	res, err := tx.ExecContext(ctx, q, payment.RefundSucceeded, pspRefundID, orderID, from)
	return sqldb.Changed(res, err, "refund %d %s -> succeeded", orderID, from)
}

// ParkRefund moves a requested refund to needs_attention with the reason.
// pastDeadline restricts it to a refund whose deadline has passed
// (database time); without it the refund is parked now (the PSP refused).
func ParkRefund(ctx context.Context, tx *sqlx.Tx, orderID uint64, reason string, pastDeadline bool) (bool, error) {
	q := `UPDATE refunds SET status = ?, parked_at = NOW(6), parked_reason = ?, updated_at = NOW(6)
WHERE order_id = ? AND status = ?`
	if pastDeadline {
		q += ` AND deadline_at <= NOW(6)`
	}
	res, err := tx.ExecContext(ctx, q, payment.RefundNeedsAttention, payment.Clip(reason, 512), orderID, payment.RefundRequested)
	return sqldb.Changed(res, err, "park refund %d", orderID)
}

// ParkedRefund is a parked refund with its schedule.
type ParkedRefund struct {
	payment.Refund
	SweepRounds int
	ParkedAt    time.Time
}

type parkedRefundRow struct {
	refundRow
	parkedColumns
}

func (r parkedRefundRow) parked() ParkedRefund {
	return ParkedRefund{Refund: r.domain(), SweepRounds: r.SweepRounds, ParkedAt: r.ParkedAt.Time}
}

// ParkedRefunds returns the refunds parked as needs_attention, oldest
// first.
func ParkedRefunds(ctx context.Context, db sqlx.QueryerContext, limit int) ([]ParkedRefund, error) {
	const q = `SELECT ` + refundColumns + `, sweep_rounds, parked_at FROM refunds
WHERE status = ? ORDER BY parked_at, order_id LIMIT ?`
	return selectParked(ctx, db, q, payment.RefundNeedsAttention, limit, "parked refunds", parkedRefundRow.parked)
}
