package psp

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/sqldb"
)

// The PSP's books: psp_charges and psp_refunds. Nothing outside this package
// runs these statements. The only writes are INSERTs guarded by the unique
// idempotency keys; nothing is ever updated or deleted.

type chargeRow struct {
	ChargeID       string    `db:"charge_id"`
	IdempotencyKey string    `db:"idempotency_key"`
	OrderRef       string    `db:"order_ref"`
	CustomerID     string    `db:"customer_id"`
	AmountCents    int64     `db:"amount_cents"`
	Currency       string    `db:"currency"`
	Status         string    `db:"status"`
	DeclineCode    string    `db:"decline_code"`
	CreatedAt      time.Time `db:"created_at"`
}

// charge is the row as the API answers it: the same fields (the row's
// carry column tags), the time in UTC.
func (r chargeRow) charge() Charge {
	c := Charge(r)
	c.CreatedAt = c.CreatedAt.UTC()
	return c
}

type refundRow struct {
	RefundID       string    `db:"refund_id"`
	IdempotencyKey string    `db:"idempotency_key"`
	ChargeID       string    `db:"charge_id"`
	AmountCents    int64     `db:"amount_cents"`
	Status         string    `db:"status"`
	CreatedAt      time.Time `db:"created_at"`
}

// refund is the row as the API answers it, like chargeRow.charge.
func (r refundRow) refund() Refund {
	f := Refund(r)
	f.CreatedAt = f.CreatedAt.UTC()
	return f
}

// getOne runs q, the SELECT of one row by arg, and returns it converted;
// no row is notFound, another error is wrapped as what.
func getOne[R, T any](ctx context.Context, db sqlx.QueryerContext, convert func(R) T, q string, arg any,
	notFound error, what string) (T, error) {
	var r R
	if err := sqlx.GetContext(ctx, db, &r, q, arg); err != nil {
		var zero T
		return zero, sqldb.NoRowsAs(err, notFound, "%s", what)
	}
	return convert(r), nil
}

// selectAll runs q, the SELECT of rows by arg, and returns them converted;
// an error is wrapped as what.
func selectAll[R, T any](ctx context.Context, db sqlx.QueryerContext, convert func(R) T, q string, arg any, what string) ([]T, error) {
	var rows []R
	if err := sqlx.SelectContext(ctx, db, &rows, q, arg); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out := make([]T, 0, len(rows))
	for _, r := range rows {
		out = append(out, convert(r))
	}
	return out, nil
}

// insertCharge writes a new charge, r as given (its created_at included). It
// fails with a duplicate key error (1062) when the idempotency key was
// charged before: the unique key, not a read before the write, decides
// which of two concurrent calls charges.
func insertCharge(ctx context.Context, db sqlx.ExecerContext, r chargeRow) error {
	const q = `INSERT INTO psp_charges
  (charge_id, idempotency_key, order_ref, customer_id, amount_cents, currency, status, decline_code, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
	_, err := db.ExecContext(ctx, q, r.ChargeID, r.IdempotencyKey, r.OrderRef, r.CustomerID,
		r.AmountCents, r.Currency, r.Status, r.DeclineCode, r.CreatedAt)
	if err != nil {
		return fmt.Errorf("insert charge: %w", err)
	}
	return nil
}

// chargeByKey returns the charge made with an idempotency key, or errNoCharge.
func chargeByKey(ctx context.Context, db sqlx.QueryerContext, key string) (Charge, error) {
	const q = `SELECT charge_id, idempotency_key, order_ref, customer_id, amount_cents, currency, status, decline_code, created_at
FROM psp_charges WHERE idempotency_key = ?`
	return getOne(ctx, db, chargeRow.charge, q, key, errNoCharge, "charge by key")
}

// chargesForOrder returns every charge record of an order, oldest first.
func chargesForOrder(ctx context.Context, db sqlx.QueryerContext, orderRef string) ([]Charge, error) {
	const q = `SELECT charge_id, idempotency_key, order_ref, customer_id, amount_cents, currency, status, decline_code, created_at
FROM psp_charges WHERE order_ref = ? ORDER BY created_at, charge_id`
	return selectAll(ctx, db, chargeRow.charge, q, orderRef, "charges for order")
}

// lockCharge reads a charge and locks its row until the transaction ends, so
// that refunds of one charge are decided one after the other. It returns
// errUnknownCharge when there is no such charge.
func lockCharge(ctx context.Context, tx *sqlx.Tx, chargeID string) (Charge, error) {
	const q = `SELECT charge_id, idempotency_key, order_ref, customer_id, amount_cents, currency, status, decline_code, created_at
FROM psp_charges WHERE charge_id = ? FOR UPDATE`
	return getOne(ctx, tx, chargeRow.charge, q, chargeID, errUnknownCharge, "lock charge")
}

// insertRefund writes a new refund, r as given; like insertCharge it fails
// with 1062 when the idempotency key was used before.
func insertRefund(ctx context.Context, tx *sqlx.Tx, r refundRow) error {
	const q = `INSERT INTO psp_refunds (refund_id, idempotency_key, charge_id, amount_cents, status, created_at)
VALUES (?, ?, ?, ?, ?, ?)`
	if _, err := tx.ExecContext(ctx, q, r.RefundID, r.IdempotencyKey, r.ChargeID, r.AmountCents, r.Status, r.CreatedAt); err != nil {
		return fmt.Errorf("insert refund: %w", err)
	}
	return nil
}

// refundedCents sums the refunds of a charge that this transaction can see:
// the committed ones and its own.
func refundedCents(ctx context.Context, tx *sqlx.Tx, chargeID string) (int64, error) {
	const q = `SELECT COALESCE(SUM(amount_cents), 0) FROM psp_refunds WHERE charge_id = ?`
	var sum int64
	if err := tx.GetContext(ctx, &sum, q, chargeID); err != nil {
		return 0, fmt.Errorf("refunded cents: %w", err)
	}
	return sum, nil
}

// refundByKey returns the refund made with an idempotency key, or errNoRefund.
func refundByKey(ctx context.Context, db sqlx.QueryerContext, key string) (Refund, error) {
	const q = `SELECT refund_id, idempotency_key, charge_id, amount_cents, status, created_at
FROM psp_refunds WHERE idempotency_key = ?`
	return getOne(ctx, db, refundRow.refund, q, key, errNoRefund, "refund by key")
}

// refundsForCharge returns every refund of a charge, oldest first.
func refundsForCharge(ctx context.Context, db sqlx.QueryerContext, chargeID string) ([]Refund, error) {
	const q = `SELECT refund_id, idempotency_key, charge_id, amount_cents, status, created_at
FROM psp_refunds WHERE charge_id = ? ORDER BY created_at, refund_id`
	return selectAll(ctx, db, refundRow.refund, q, chargeID, "refunds for charge")
}
