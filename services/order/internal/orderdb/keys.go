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
	return removeOld(ctx, db, q, "forget create keys", retention, batch)
}

// DeleteCancelKeys deletes at most batch cancel keys (cancel_requests)
// older than retention, and says how many it deleted.
func DeleteCancelKeys(ctx context.Context, db sqlx.ExecerContext, retention time.Duration, batch int) (int64, error) {
	const q = `DELETE FROM cancel_requests WHERE created_at < NOW(6) - INTERVAL ? MICROSECOND LIMIT ?`
	return removeOld(ctx, db, q, "delete cancel keys", retention, batch)
}

// removeOld runs q, which deletes or forgets at most batch (its second
// argument) keys older than retention (its first, in microseconds), and
// says how many it changed; what names it in an error.
func removeOld(ctx context.Context, db sqlx.ExecerContext, q, what string, retention time.Duration, batch int) (int64, error) {
	res, err := db.ExecContext(ctx, q, retention.Microseconds(), batch)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return res.RowsAffected()
}
