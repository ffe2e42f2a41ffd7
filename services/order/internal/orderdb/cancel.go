package orderdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/sqldb"
)

// CancelRequest is what a cancel's Idempotency-Key recorded: the order and
// the request it was used for, and what the request did.
type CancelRequest struct {
	OrderID     uint64 `db:"order_id"`
	RequestHash string `db:"request_hash"`
	Result      string `db:"result"`
}

// GetCancelRequest returns the cancel recorded under an idempotency key;
// found is false for a key never used.
func GetCancelRequest(ctx context.Context, db sqlx.QueryerContext, key string) (r CancelRequest, found bool, err error) {
	const q = `SELECT order_id, request_hash, result FROM cancel_requests WHERE idempotency_key = ?`
	err = sqlx.GetContext(ctx, db, &r, q, key)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return CancelRequest{}, false, nil
	case err != nil:
		return CancelRequest{}, false, fmt.Errorf("cancel request: %w", err)
	}
	return r, true, nil
}

// InsertCancelRequest records a cancel under its idempotency key, in the
// cancel's transaction. A key used before returns ErrDuplicateKey: the
// primary key decides between two requests racing with one key.
func InsertCancelRequest(ctx context.Context, tx *sqlx.Tx, key string, r CancelRequest) error {
	const q = `INSERT INTO cancel_requests (idempotency_key, order_id, request_hash, result) VALUES (?, ?, ?, ?)`
	_, err := tx.ExecContext(ctx, q, key, r.OrderID, r.RequestHash, r.Result)
	if sqldb.IsDuplicateKey(err) {
		return ErrDuplicateKey
	}
	if err != nil {
		return fmt.Errorf("insert cancel request: %w", err)
	}
	return nil
}
