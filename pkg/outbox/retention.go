package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
)

// DeleteSent deletes up to limit 'sent' events whose sent_at is more than
// window ago (database time), oldest first. It returns how many it deleted
// and whether it found a full batch of candidates (then there may be more;
// a rival instance may have deleted some of them, so the count alone does
// not say). Only 'sent' rows: 'pending' and 'sending' are work to do and
// 'failed' rows wait for an operator (they are never deleted
// automatically). pkg/retention calls it in batches.
//
// Two short autocommit statements, no transaction: a plain (non-locking)
// read of the candidate ids, then a DELETE of exactly those ids that
// restates the conditions. Several instances may run it at once: both may
// pick the same ids, one deletes them, the other's DELETE finds them gone
// and counts nothing, so every row is counted once.
//
// The read walks ix_dispatch (status, next_attempt_at, created_at) in order
// and stops after limit rows: a sent row was claimed at or after its
// next_attempt_at and sent after the claim, so "next_attempt_at < cutoff"
// restates what "sent_at < cutoff" already implies, and lets the index do
// the work without a new one. It is forced because, with many expired rows,
// the optimizer otherwise prefers ix_expired (status, lease_until) and
// sorts every sent row for each batch.
func DeleteSent(ctx context.Context, db *sqlx.DB, window time.Duration, limit int) (deleted int64, full bool, err error) {
	const qSelect = `SELECT event_id FROM outbox_events FORCE INDEX (ix_dispatch)
WHERE status = 'sent'
  AND next_attempt_at < TIMESTAMPADD(MICROSECOND, ?, NOW(6))
  AND sent_at < TIMESTAMPADD(MICROSECOND, ?, NOW(6))
ORDER BY next_attempt_at
LIMIT ?`
	const qDelete = `DELETE FROM outbox_events
WHERE event_id IN (?) AND status = 'sent' AND sent_at < TIMESTAMPADD(MICROSECOND, ?, NOW(6))`
	cut := -window.Microseconds()
	var ids []string
	if err := db.SelectContext(ctx, &ids, qSelect, cut, cut, limit); err != nil {
		return 0, false, fmt.Errorf("select sent outbox rows: %w", err)
	}
	if len(ids) == 0 {
		return 0, false, nil
	}
	q, args, err := sqlx.In(qDelete, ids, cut)
	if err != nil {
		return 0, false, err
	}
	res, err := db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, false, fmt.Errorf("delete sent outbox rows: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, false, fmt.Errorf("delete sent outbox rows: %w", err)
	}
	return n, len(ids) == limit, nil
}
