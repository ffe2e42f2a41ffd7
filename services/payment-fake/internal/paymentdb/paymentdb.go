// Package paymentdb is the payment service's SQL: the payments and refunds
// tables. Row structs stay here; callers get domain types. The PSP's own
// tables (psp_charges, psp_refunds) are not read here, ever: the payment
// service knows the PSP only through its HTTP API.
//
// Times that decide something (deadlines, the sweep's schedule) are the
// database's (NOW(6)), never the caller's clock, so several instances agree.
// Functions that must run inside a transaction take *sqlx.Tx.
package paymentdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
)

// ErrExists: the order has a payment (or a cancel marker) already.
var ErrExists = errors.New("payment for this order exists")

// stepRow is the columns a payment's row and a refund's row share (Step):
// the order, the key and the amount of the call to the PSP, the status,
// and the evidence of failed attempts.
type stepRow struct {
	OrderID        uint64         `db:"order_id"`
	IdempotencyKey string         `db:"idempotency_key"`
	AmountCents    int64          `db:"amount_cents"`
	Status         string         `db:"status"`
	Attempts       int            `db:"attempts"`
	LastError      string         `db:"last_error"`
	ParkedReason   string         `db:"parked_reason"`
	RequestEventID sql.NullString `db:"request_event_id"`
	CreatedAt      time.Time      `db:"created_at"`
	UpdatedAt      time.Time      `db:"updated_at"`
}

// parkedColumns is what the lists of parked rows read besides the row.
type parkedColumns struct {
	SweepRounds int          `db:"sweep_rounds"`
	ParkedAt    sql.NullTime `db:"parked_at"`
}

type paymentRow struct {
	stepRow
	CustomerID        string         `db:"customer_id"`
	Currency          string         `db:"currency"`
	PSPChargeID       sql.NullString `db:"psp_charge_id"`
	FailureReason     string         `db:"failure_reason"`
	ChargeSentAt      sql.NullTime   `db:"charge_sent_at"`
	CancelRequestedAt sql.NullTime   `db:"cancel_requested_at"`
	CancelReason      string         `db:"cancel_reason"`
	DeadlineAt        sql.NullTime   `db:"deadline_at"`
	Version           uint64         `db:"aggregate_version"`
}

const paymentColumns = `order_id, customer_id, amount_cents, currency, status, idempotency_key,
  psp_charge_id, failure_reason, charge_sent_at, cancel_requested_at, cancel_reason, deadline_at, attempts, last_error,
  parked_reason, aggregate_version, request_event_id, created_at, updated_at`

func (r paymentRow) domain() payment.Payment {
	return payment.Payment{
		OrderID: r.OrderID, CustomerID: r.CustomerID, AmountCents: r.AmountCents, Currency: r.Currency,
		Status: payment.Status(r.Status), IdempotencyKey: r.IdempotencyKey, PSPChargeID: r.PSPChargeID.String,
		FailureReason: r.FailureReason, Version: r.Version, ChargeSent: r.ChargeSentAt.Valid,
		CancelRequested: r.CancelRequestedAt.Valid, CancelReason: r.CancelReason,
		DeadlineAt: r.DeadlineAt.Time, Attempts: r.Attempts, LastError: r.LastError, ParkedReason: r.ParkedReason,
		RequestEventID: r.RequestEventID.String, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

// Insert inserts a new pending payment whose outcome is due within
// deadline and which the sweep first looks at after grace (both from now,
// database time), with the event_id of its charge request. An existing row for the order (a payment, or the marker
// of a cancel that came first) returns ErrExists: the primary key, not a
// prior SELECT, decides, so two events racing for one order create one row
// (the second INSERT waits for the first transaction and then collides).
// The failed statement leaves the transaction usable: MySQL rolls back the
// statement, not the transaction.
func Insert(ctx context.Context, tx *sqlx.Tx, p payment.Payment, deadline, grace time.Duration) error {
	const q = `INSERT INTO payments
  (order_id, customer_id, amount_cents, currency, status, idempotency_key, aggregate_version,
   deadline_at, next_attempt_at, request_event_id)
VALUES (?, ?, ?, ?, ?, ?, ?, TIMESTAMPADD(MICROSECOND, ?, NOW(6)), TIMESTAMPADD(MICROSECOND, ?, NOW(6)), NULLIF(?, ''))`
	return insertOnce(ctx, tx, ErrExists, "insert payment", p.OrderID, q, p.OrderID, p.CustomerID, p.AmountCents, p.Currency,
		p.Status, p.IdempotencyKey, p.Version, deadline.Microseconds(), grace.Microseconds(), p.RequestEventID)
}

// InsertMarker inserts the row a cancel leaves for an order with no
// payment yet (payment.Marker). ErrExists: a payment was inserted first.
func InsertMarker(ctx context.Context, tx *sqlx.Tx, m payment.Payment) error {
	const q = `INSERT INTO payments
  (order_id, customer_id, amount_cents, currency, status, idempotency_key, aggregate_version,
   cancel_requested_at, cancel_reason)
VALUES (?, '', 0, '', ?, ?, 0, NOW(6), ?)`
	return insertOnce(ctx, tx, ErrExists, "insert cancel marker", m.OrderID, q, m.OrderID, m.Status, m.IdempotencyKey, m.CancelReason)
}

// insertOnce runs q, an INSERT of the order's one row, with args: a
// duplicate key is exists (the primary key decides, see Insert), another
// error is wrapped as what the order's.
func insertOnce(ctx context.Context, tx *sqlx.Tx, exists error, what string, orderID uint64, q string, args ...any) error {
	_, err := tx.ExecContext(ctx, q, args...)
	if sqldb.IsDuplicateKey(err) {
		return exists
	}
	if err != nil {
		return fmt.Errorf("%s %d: %w", what, orderID, err)
	}
	return nil
}

// Get returns an order's payment, or payment.ErrNotFound.
func Get(ctx context.Context, db sqlx.QueryerContext, orderID uint64) (payment.Payment, error) {
	const q = `SELECT ` + paymentColumns + ` FROM payments WHERE order_id = ?`
	return getRow[paymentRow](ctx, db, q, orderID, payment.ErrNotFound, "get payment")
}

// Lock reads an order's payment and locks its row until the transaction
// ends, so the decision made from it cannot race another outcome for the
// same order. Lock order everywhere: the payment, then its refund.
func Lock(ctx context.Context, tx *sqlx.Tx, orderID uint64) (payment.Payment, error) {
	const q = `SELECT ` + paymentColumns + ` FROM payments WHERE order_id = ? FOR UPDATE`
	return getRow[paymentRow](ctx, tx, q, orderID, payment.ErrNotFound, "lock payment")
}

// getRow runs q, the SELECT of an order's one row (a payment's or a
// refund's), and returns it as the domain sees it; no row is notFound, any
// other error is wrapped as what (e.g. "get payment") the order's.
func getRow[R interface{ domain() D }, D any](ctx context.Context, db sqlx.QueryerContext, q string, orderID uint64,
	notFound error, what string) (D, error) {
	var r R
	if err := sqlx.GetContext(ctx, db, &r, q, orderID); err != nil {
		var zero D
		return zero, sqldb.NoRowsAs(err, notFound, "%s %d", what, orderID)
	}
	return r.domain(), nil
}

// LockAll is Lock for the payments of several orders in one statement, in
// order id order (the primary key's): the payments of a consumer batch.
// Missing ones are absent from the result.
func LockAll(ctx context.Context, tx *sqlx.Tx, orderIDs []uint64) (map[uint64]payment.Payment, error) {
	const q = `SELECT ` + paymentColumns + ` FROM payments WHERE order_id IN (?) ORDER BY order_id FOR UPDATE`
	out, err := sqldb.SelectInMap(ctx, tx, func(r paymentRow) (uint64, payment.Payment) {
		p := r.domain()
		return p.OrderID, p
	}, q, orderIDs)
	if err != nil {
		return nil, fmt.Errorf("lock %d payments: %w", len(orderIDs), err)
	}
	return out, nil
}

// Decision is what a PSP outcome writes onto a payment.
type Decision struct {
	From, To      payment.Status
	PSPChargeID   string // the PSP's charge id (declined charges have one too)
	FailureReason string // the decline code; empty for a success
	Version       uint64 // the version of the event the move emits
}

// Decide records a PSP outcome. Compare-and-set: the WHERE restates the
// status the decision was made on; zero rows changed means the payment
// moved meanwhile, and that is returned as false, not as success.
func Decide(ctx context.Context, tx *sqlx.Tx, orderID uint64, d Decision) (bool, error) {
	const q = `UPDATE payments
SET status = ?, psp_charge_id = ?, failure_reason = ?, aggregate_version = ?, updated_at = NOW(6)
WHERE order_id = ? AND status = ?`
	res, err := tx.ExecContext(ctx, q, d.To, d.PSPChargeID, d.FailureReason, d.Version, orderID, d.From)
	return sqldb.Changed(res, err, "payment %d %s -> %s", orderID, d.From, d.To)
}

// RequestCancel remembers that the order was cancelled, once: only a
// payment still in status that has no cancel recorded changes.
func RequestCancel(ctx context.Context, tx *sqlx.Tx, orderID uint64, status payment.Status, reason string) (bool, error) {
	const q = `UPDATE payments SET cancel_requested_at = NOW(6), cancel_reason = ?, updated_at = NOW(6)
WHERE order_id = ? AND status = ? AND cancel_requested_at IS NULL`
	res, err := tx.ExecContext(ctx, q, payment.Clip(reason, 255), orderID, status)
	return sqldb.Changed(res, err, "cancel payment %d", orderID)
}

// MarkChargeSent records that the charge is about to be sent to the PSP,
// just before each send, and reports whether it may be sent: only a
// payment still pending whose order is not cancelled passes the
// compare-and-set. It takes the payment's row lock, so it is ordered with
// the cancel's transaction: either the cancel finds the charge sent (and
// settles it by a status query), or this finds the order cancelled (and
// nothing is sent). One statement, outside any transaction.
func MarkChargeSent(ctx context.Context, db sqlx.ExecerContext, orderID uint64) (bool, error) {
	const q = `UPDATE payments SET charge_sent_at = NOW(6)
WHERE order_id = ? AND status = ? AND cancel_requested_at IS NULL`
	res, err := db.ExecContext(ctx, q, orderID, payment.Pending)
	return sqldb.Changed(res, err, "mark charge of payment %d sent", orderID)
}

// Withdraw closes a payment whose charge was never sent, for its cancelled
// order: status from (pending, or needs_attention) to (withdrawn), the
// cancel remembered, no sweep round left. Compare-and-set on "still from,
// never sent, not cancelled yet".
func Withdraw(ctx context.Context, tx *sqlx.Tx, orderID uint64, from, to payment.Status, reason string) (bool, error) {
	const q = `UPDATE payments SET status = ?, cancel_requested_at = NOW(6), cancel_reason = ?, next_attempt_at = NULL,
  updated_at = NOW(6)
WHERE order_id = ? AND status = ? AND charge_sent_at IS NULL AND cancel_requested_at IS NULL`
	res, err := tx.ExecContext(ctx, q, to, payment.Clip(reason, 255), orderID, from)
	return sqldb.Changed(res, err, "withdraw payment %d", orderID)
}

// SettleSoon brings the sweep's next look at a pending payment forward to
// at most within from now, so that a cancelled order's charge in flight is
// settled by a status query then (the in-flight window), not after the
// sweep's backoff.
func SettleSoon(ctx context.Context, tx *sqlx.Tx, orderID uint64, within time.Duration) error {
	const q = `UPDATE payments
SET next_attempt_at = LEAST(COALESCE(next_attempt_at, TIMESTAMPADD(MICROSECOND, ?, NOW(6))), TIMESTAMPADD(MICROSECOND, ?, NOW(6)))
WHERE order_id = ? AND status = ?`
	if _, err := tx.ExecContext(ctx, q, within.Microseconds(), within.Microseconds(), orderID, payment.Pending); err != nil {
		return fmt.Errorf("settle payment %d soon: %w", orderID, err)
	}
	return nil
}

// VoidSettled closes a cancelled order's pending payment as to
// (cancelled_before_charge) once its last send to the PSP is older than
// window (database time): the PSP had no charge with the key after that,
// so nothing was charged. Compare-and-set; false: too early, or moved.
func VoidSettled(ctx context.Context, tx *sqlx.Tx, orderID uint64, to payment.Status, reason string, window time.Duration) (bool, error) {
	const q = `UPDATE payments SET status = ?, parked_at = NOW(6), parked_reason = ?, next_attempt_at = NULL,
  updated_at = NOW(6)
WHERE order_id = ? AND status = ? AND cancel_requested_at IS NOT NULL
  AND (charge_sent_at IS NULL OR charge_sent_at <= TIMESTAMPADD(MICROSECOND, -?, NOW(6)))`
	res, err := tx.ExecContext(ctx, q, to, payment.Clip(reason, 512), orderID, payment.Pending, window.Microseconds())
	return sqldb.Changed(res, err, "void payment %d", orderID)
}

// NoteCancel replaces the cancel reason of a payment still in status,
// without moving it: how a late event is recorded as stale on a marker.
func NoteCancel(ctx context.Context, tx *sqlx.Tx, orderID uint64, status payment.Status, note string) (bool, error) {
	const q = `UPDATE payments SET cancel_reason = ?, updated_at = NOW(6) WHERE order_id = ? AND status = ?`
	res, err := tx.ExecContext(ctx, q, payment.Clip(note, 255), orderID, status)
	return sqldb.Changed(res, err, "note on payment %d", orderID)
}

// Advance records that the payment emitted another event (a re-requested
// charge, a refund request) without changing its status. Compare-and-set
// on the status and the version read under the row lock.
func Advance(ctx context.Context, tx *sqlx.Tx, orderID uint64, status payment.Status, from, to uint64) (bool, error) {
	const q = `UPDATE payments SET aggregate_version = ?, updated_at = NOW(6)
WHERE order_id = ? AND status = ? AND aggregate_version = ?`
	res, err := tx.ExecContext(ctx, q, to, orderID, status, from)
	return sqldb.Changed(res, err, "payment %d version %d -> %d", orderID, from, to)
}

// Refunded moves a succeeded payment to refunded, with the version of the
// payment.refunded event.
func Refunded(ctx context.Context, tx *sqlx.Tx, orderID uint64, version uint64) (bool, error) {
	const q = `UPDATE payments SET status = ?, aggregate_version = ?, updated_at = NOW(6)
WHERE order_id = ? AND status = ?`
	res, err := tx.ExecContext(ctx, q, payment.Refunded, version, orderID, payment.Succeeded)
	return sqldb.Changed(res, err, "payment %d refunded", orderID)
}

// Park moves a payment still pending past its deadline (database time) to
// status to (needs_attention, or cancelled_before_charge for a cancelled
// order the PSP never charged), with the reason.
func Park(ctx context.Context, tx *sqlx.Tx, orderID uint64, to payment.Status, reason string) (bool, error) {
	const q = `UPDATE payments SET status = ?, parked_at = NOW(6), parked_reason = ?, next_attempt_at = NULL,
  updated_at = NOW(6)
WHERE order_id = ? AND status = ? AND deadline_at <= NOW(6)`
	res, err := tx.ExecContext(ctx, q, to, payment.Clip(reason, 512), orderID, payment.Pending)
	return sqldb.Changed(res, err, "park payment %d", orderID)
}

// Parked returns the payments parked as needs_attention, oldest first.
func Parked(ctx context.Context, db sqlx.QueryerContext, limit int) ([]ParkedPayment, error) {
	const q = `SELECT ` + paymentColumns + `, sweep_rounds, parked_at FROM payments
WHERE status = ? ORDER BY parked_at, order_id LIMIT ?`
	return selectParked(ctx, db, q, payment.NeedsAttention, limit, "parked payments", parkedPaymentRow.parked)
}

// selectParked runs q, the list of the rows parked in status (R, a row
// with its parkedColumns), oldest first, and returns each as parked makes
// it; an error is wrapped as what.
func selectParked[R, P any](ctx context.Context, db sqlx.QueryerContext, q string, status any, limit int, what string,
	parked func(R) P) ([]P, error) {
	var rows []R
	if err := sqlx.SelectContext(ctx, db, &rows, q, status, limit); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out := make([]P, len(rows))
	for i, r := range rows {
		out[i] = parked(r)
	}
	return out, nil
}

// ParkedPayment is a parked payment with its schedule.
type ParkedPayment struct {
	payment.Payment
	SweepRounds int
	ParkedAt    time.Time
}

type parkedPaymentRow struct {
	paymentRow
	parkedColumns
}

func (r parkedPaymentRow) parked() ParkedPayment {
	return ParkedPayment{Payment: r.domain(), SweepRounds: r.SweepRounds, ParkedAt: r.ParkedAt.Time}
}

// CountParked returns the rows parked as needs_attention in payments and in
// refunds.
func CountParked(ctx context.Context, db sqlx.QueryerContext) (charges, refunds int, err error) {
	const q = `SELECT
  (SELECT COUNT(*) FROM payments WHERE status = ?) AS charges,
  (SELECT COUNT(*) FROM refunds WHERE status = ?) AS refunds`
	var n struct {
		Charges int `db:"charges"`
		Refunds int `db:"refunds"`
	}
	if err := sqlx.GetContext(ctx, db, &n, q, payment.NeedsAttention, payment.RefundNeedsAttention); err != nil {
		return 0, 0, fmt.Errorf("count parked: %w", err)
	}
	return n.Charges, n.Refunds, nil
}
