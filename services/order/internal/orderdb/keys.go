package orderdb

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
)

// ForgetCreateKeys sets to NULL the idempotency keys of at most batch
// orders created longer than retention ago (database time), and says how
// many it forgot. The orders stay; a later request with one of these keys
// is a new request (docs/contract.md, "Idempotency keys").
func ForgetCreateKeys(ctx context.Context, db sqlx.ExecerContext, retention time.Duration, batch int) (int64, error) {
	const q = `UPDATE orders SET idempotency_key = NULL
WHERE idempotency_key IS NOT NULL AND created_at < NOW(6) - INTERVAL ? MICROSECOND LIMIT ?`
	res, err := db.ExecContext(ctx, q, retention.Microseconds(), batch)
	if err != nil {
		return 0, fmt.Errorf("forget create keys: %w", err)
	}
	return res.RowsAffected()
}

// DeleteCancelKeys deletes at most batch cancel keys (cancel_requests)
// older than retention, and says how many it deleted.
func DeleteCancelKeys(ctx context.Context, db sqlx.ExecerContext, retention time.Duration, batch int) (int64, error) {
	const q = `DELETE FROM cancel_requests WHERE created_at < NOW(6) - INTERVAL ? MICROSECOND LIMIT ?`
	res, err := db.ExecContext(ctx, q, retention.Microseconds(), batch)
	if err != nil {
		return 0, fmt.Errorf("delete cancel keys: %w", err)
	}
	return res.RowsAffected()
}
