package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
)

// DeleteExpired deletes up to limit inbox rows processed more than window
// ago (database time), oldest first, and returns how many it deleted. It is
// one short autocommit statement on the processed_at index, so several
// instances may run it at once: a row is deleted by one of them, and the
// others skip it. pkg/retention calls it in batches until a batch is short.
//
// Rows inside the window are what makes a redelivery a duplicate; deleting
// one earlier would let a replay apply its event twice. That is why the
// window must cover every way an old message can come back, and why a
// consumer refuses events older than its ReplayWindow (see ErrTooOld).
func DeleteExpired(ctx context.Context, db sqlx.ExecerContext, window time.Duration, limit int) (int64, error) {
	const q = `DELETE FROM consumer_inbox
WHERE processed_at < TIMESTAMPADD(MICROSECOND, ?, NOW(6))
ORDER BY processed_at
LIMIT ?`
	res, err := db.ExecContext(ctx, q, -window.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("delete expired inbox rows: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("delete expired inbox rows: %w", err)
	}
	return n, nil
}
