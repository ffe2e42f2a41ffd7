// Package paymentdb is the payment service's SQL: the payments table. Row
// structs stay here; callers get domain types. The PSP's own tables
// (psp_charges, psp_refunds) are not read here, ever: the payment service
// knows the PSP only through its HTTP API.
package paymentdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/sqldb"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
)

// ErrExists: the order has a payment already.
var ErrExists = errors.New("payment for this order exists")

type paymentRow struct {
	OrderID        uint64         `db:"order_id"`
	CustomerID     string         `db:"customer_id"`
	AmountCents    int64          `db:"amount_cents"`
	Currency       string         `db:"currency"`
	Status         string         `db:"status"`
	IdempotencyKey string         `db:"idempotency_key"`
	PSPChargeID    sql.NullString `db:"psp_charge_id"`
	FailureReason  string         `db:"failure_reason"`
	Version        uint64         `db:"aggregate_version"`
	CreatedAt      time.Time      `db:"created_at"`
	UpdatedAt      time.Time      `db:"updated_at"`
}

const paymentColumns = `order_id, customer_id, amount_cents, currency, status, idempotency_key,
  psp_charge_id, failure_reason, aggregate_version, created_at, updated_at`

func (r paymentRow) domain() payment.Payment {
	return payment.Payment{
		OrderID: r.OrderID, CustomerID: r.CustomerID, AmountCents: r.AmountCents, Currency: r.Currency,
		Status: payment.Status(r.Status), IdempotencyKey: r.IdempotencyKey, PSPChargeID: r.PSPChargeID.String,
		FailureReason: r.FailureReason, Version: r.Version, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

// Insert inserts a new payment. An existing payment for the order returns
// ErrExists: the primary key, not a prior SELECT, decides, so two events
// racing for one order create one payment (the second INSERT waits for the
// first transaction and then collides). The failed statement leaves the
// transaction usable: MySQL rolls back the statement, not the transaction.
func Insert(ctx context.Context, tx *sqlx.Tx, p payment.Payment) error {
	const q = `INSERT INTO payments
  (order_id, customer_id, amount_cents, currency, status, idempotency_key, aggregate_version)
VALUES (?, ?, ?, ?, ?, ?, ?)`
	_, err := tx.ExecContext(ctx, q, p.OrderID, p.CustomerID, p.AmountCents, p.Currency, p.Status,
		p.IdempotencyKey, p.Version)
	if sqldb.IsDuplicateKey(err) {
		return ErrExists
	}
	if err != nil {
		return fmt.Errorf("insert payment %d: %w", p.OrderID, err)
	}
	return nil
}

// Get returns an order's payment, or payment.ErrNotFound.
func Get(ctx context.Context, db sqlx.QueryerContext, orderID uint64) (payment.Payment, error) {
	const q = `SELECT ` + paymentColumns + ` FROM payments WHERE order_id = ?`
	var r paymentRow
	if err := sqlx.GetContext(ctx, db, &r, q, orderID); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return payment.Payment{}, payment.ErrNotFound
		}
		return payment.Payment{}, fmt.Errorf("get payment %d: %w", orderID, err)
	}
	return r.domain(), nil
}

// Lock reads an order's payment and locks its row until the transaction
// ends, so the decision made from it cannot race another outcome for the
// same order.
func Lock(ctx context.Context, tx *sqlx.Tx, orderID uint64) (payment.Payment, error) {
	const q = `SELECT ` + paymentColumns + ` FROM payments WHERE order_id = ? FOR UPDATE`
	var r paymentRow
	if err := tx.GetContext(ctx, &r, q, orderID); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return payment.Payment{}, payment.ErrNotFound
		}
		return payment.Payment{}, fmt.Errorf("lock payment %d: %w", orderID, err)
	}
	return r.domain(), nil
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
	if err != nil {
		return false, fmt.Errorf("payment %d %s -> %s: %w", orderID, d.From, d.To, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("payment %d %s -> %s: %w", orderID, d.From, d.To, err)
	}
	return n == 1, nil
}
