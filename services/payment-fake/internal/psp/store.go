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

func (r chargeRow) charge() Charge {
	return Charge{
		ChargeID:       r.ChargeID,
		IdempotencyKey: r.IdempotencyKey,
		OrderRef:       r.OrderRef,
		CustomerID:     r.CustomerID,
		AmountCents:    r.AmountCents,
		Currency:       r.Currency,
		Status:         r.Status,
		DeclineCode:    r.DeclineCode,
		CreatedAt:      r.CreatedAt.UTC(),
	}
}

type refundRow struct {
	RefundID       string    `db:"refund_id"`
	IdempotencyKey string    `db:"idempotency_key"`
	ChargeID       string    `db:"charge_id"`
	AmountCents    int64     `db:"amount_cents"`
	Status         string    `db:"status"`
	CreatedAt      time.Time `db:"created_at"`
}

func (r refundRow) refund() Refund {
	return Refund{
		RefundID:       r.RefundID,
		IdempotencyKey: r.IdempotencyKey,
		ChargeID:       r.ChargeID,
		AmountCents:    r.AmountCents,
		Status:         r.Status,
		CreatedAt:      r.CreatedAt.UTC(),
	}
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
	var r chargeRow
	if err := sqlx.GetContext(ctx, db, &r, q, key); err != nil {
		return Charge{}, sqldb.NoRowsAs(err, errNoCharge, "charge by key")
	}
	return r.charge(), nil
}

// chargesForOrder returns every charge record of an order, oldest first.
func chargesForOrder(ctx context.Context, db sqlx.QueryerContext, orderRef string) ([]Charge, error) {
	const q = `SELECT charge_id, idempotency_key, order_ref, customer_id, amount_cents, currency, status, decline_code, created_at
FROM psp_charges WHERE order_ref = ? ORDER BY created_at, charge_id`
	var rows []chargeRow
	if err := sqlx.SelectContext(ctx, db, &rows, q, orderRef); err != nil {
		return nil, fmt.Errorf("charges for order: %w", err)
	}
	out := make([]Charge, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.charge())
	}
	return out, nil
}

// lockCharge reads a charge and locks its row until the transaction ends, so
// that refunds of one charge are decided one after the other. It returns
// errUnknownCharge when there is no such charge.
func lockCharge(ctx context.Context, tx *sqlx.Tx, chargeID string) (Charge, error) {
	const q = `SELECT charge_id, idempotency_key, order_ref, customer_id, amount_cents, currency, status, decline_code, created_at
FROM psp_charges WHERE charge_id = ? FOR UPDATE`
	var r chargeRow
	if err := tx.GetContext(ctx, &r, q, chargeID); err != nil {
		return Charge{}, sqldb.NoRowsAs(err, errUnknownCharge, "lock charge")
	}
	return r.charge(), nil
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
	var r refundRow
	if err := sqlx.GetContext(ctx, db, &r, q, key); err != nil {
		return Refund{}, sqldb.NoRowsAs(err, errNoRefund, "refund by key")
	}
	return r.refund(), nil
}

// refundsForCharge returns every refund of a charge, oldest first.
func refundsForCharge(ctx context.Context, db sqlx.QueryerContext, chargeID string) ([]Refund, error) {
	const q = `SELECT refund_id, idempotency_key, charge_id, amount_cents, status, created_at
FROM psp_refunds WHERE charge_id = ? ORDER BY created_at, refund_id`
	var rows []refundRow
	if err := sqlx.SelectContext(ctx, db, &rows, q, chargeID); err != nil {
		return nil, fmt.Errorf("refunds for charge: %w", err)
	}
	out := make([]Refund, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.refund())
	}
	return out, nil
}
