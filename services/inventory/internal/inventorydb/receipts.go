package inventorydb

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/sqldb"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
)

// Receipt is a goods receipt's idempotency record.
type Receipt struct {
	Key      string `db:"idempotency_key"`
	SKU      string `db:"sku"`
	Quantity int    `db:"quantity"`
}

// InsertReceipt records a receipt's Idempotency-Key in its transaction.
// sqldb.IsDuplicateKey(err): the key was used before (ReceiptByKey).
func InsertReceipt(ctx context.Context, tx *sqlx.Tx, r Receipt) error {
	const q = `INSERT INTO stock_receipts (idempotency_key, sku, quantity) VALUES (?, ?, ?)`
	if _, err := tx.ExecContext(ctx, q, r.Key, r.SKU, r.Quantity); err != nil {
		return fmt.Errorf("insert receipt key: %w", err)
	}
	return nil
}

// ReceiptByKey returns the receipt recorded under key, or
// inventory.ErrNoReceipt.
func ReceiptByKey(ctx context.Context, db sqlx.QueryerContext, key string) (Receipt, error) {
	const q = `SELECT idempotency_key, sku, quantity FROM stock_receipts WHERE idempotency_key = ?`
	var r Receipt
	if err := sqlx.GetContext(ctx, db, &r, q, key); err != nil {
		return Receipt{}, sqldb.NoRowsAs(err, inventory.ErrNoReceipt, "receipt by key")
	}
	return r, nil
}

// DeleteReceiptKeys deletes at most batch receipt keys older than
// retention, by database time, and says how many it deleted.
func DeleteReceiptKeys(ctx context.Context, db sqlx.ExecerContext, retention time.Duration, batch int) (int64, error) {
	const q = `DELETE FROM stock_receipts WHERE created_at < NOW(6) - INTERVAL ? MICROSECOND LIMIT ?`
	res, err := db.ExecContext(ctx, q, retention.Microseconds(), batch)
	if err != nil {
		return 0, fmt.Errorf("delete receipt keys: %w", err)
	}
	return res.RowsAffected()
}
