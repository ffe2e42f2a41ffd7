package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/instance"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
)

// claimed is one row this dispatcher holds under its claim token.
type claimed struct {
	EventID          string          `db:"event_id"`
	AggregateID      uint64          `db:"aggregate_id"`
	AggregateVersion uint64          `db:"aggregate_version"`
	EventType        string          `db:"event_type"`
	SchemaVersion    int             `db:"schema_version"`
	Payload          json.RawMessage `db:"payload"`
	Attempts         int             `db:"attempts"` // after this claim's increment
	CreatedAt        time.Time       `db:"created_at"`
	Traceparent      sql.NullString  `db:"traceparent"`
	CorrectsEventID  sql.NullString  `db:"corrects_event_id"`
	ClaimToken       string          `db:"claim_token"` // read by lease recovery only
}

// claim takes up to limit due rows in one short transaction: lock them with
// FOR UPDATE SKIP LOCKED (rows other dispatchers hold are skipped, not
// waited for), stamp them with a fresh claim token and a lease measured in
// database time, count the attempt, commit. Publishing happens after the
// commit, outside any transaction.
func claim(ctx context.Context, db *sqlx.DB, limit int, lease time.Duration) (token string, rows []claimed, err error) {
	// ORDER BY follows ix_dispatch (status, next_attempt_at, created_at), so
	// the server reads the index in order and stops after LIMIT rows instead
	// of sorting every due row; see doc.go.
	const qSelect = `SELECT event_id, aggregate_id, aggregate_version, event_type, schema_version,
       payload, attempts, created_at, traceparent, corrects_event_id
FROM outbox_events
WHERE status = 'pending' AND next_attempt_at <= NOW(6)
ORDER BY next_attempt_at, created_at
LIMIT ?
FOR UPDATE SKIP LOCKED`
	// The IN list is built for exactly the selected ids; "status = 'pending'"
	// restates what must still be true.
	const qUpdate = `UPDATE outbox_events
SET status = 'sending', claim_token = ?, claimed_by = NULLIF(?, ''),
    lease_until = TIMESTAMPADD(MICROSECOND, ?, NOW(6)),
    attempts = attempts + 1, total_attempts = total_attempts + 1,
    first_attempt_at = COALESCE(first_attempt_at, NOW(6))
WHERE event_id IN (?) AND status = 'pending'`

	token = uuid.NewString()
	err = sqldb.WithTx(ctx, db, func(tx *sqlx.Tx) error {
		rows = rows[:0]
		if err := tx.SelectContext(ctx, &rows, qSelect, limit); err != nil {
			return fmt.Errorf("select due events: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		ids := make([]string, len(rows))
		for i, r := range rows {
			ids[i] = r.EventID
		}
		res, err := sqldb.ExecIn(ctx, tx, qUpdate, token, instance.ID(ctx), lease.Microseconds(), ids)
		if err != nil {
			return fmt.Errorf("mark claimed: %w", err)
		}
		if n, _ := res.RowsAffected(); n != int64(len(rows)) {
			return fmt.Errorf("mark claimed: %d of %d rows changed", n, len(rows))
		}
		return nil
	})
	if err != nil {
		return "", nil, fmt.Errorf("claim batch: %w", err)
	}
	for i := range rows {
		rows[i].Attempts++
	}
	return token, rows, nil
}

// markSent records that the broker confirmed these events. Only under our
// claim token and only while still 'sending': if the lease expired and
// another dispatcher re-claimed a row, that row is not ours to touch. It
// returns how many rows changed; fewer than asked means claims were lost.
func markSent(ctx context.Context, db sqlx.ExecerContext, token string, ids []string) (int64, error) {
	const q = `UPDATE outbox_events
SET status = 'sent', sent_at = NOW(6), claim_token = NULL, lease_until = NULL
WHERE event_id IN (?) AND status = 'sending' AND claim_token = ?`
	res, err := sqldb.ExecIn(ctx, db, q, ids, token)
	if err != nil {
		return 0, fmt.Errorf("mark sent: %w", err)
	}
	return res.RowsAffected()
}

// releaseRow hands back one row held under token after a failed attempt (a
// publish not confirmed, or a claim whose lease expired): to 'failed' (kept,
// alerted on, never deleted) once its attempts are used up or the deadline
// has passed since its first attempt (遵守总期限, database time), else to
// 'pending', due after delay. Under the claim token only, like markSent. It
// returns the status set, or "" when the row was no longer ours.
func releaseRow(ctx context.Context, db sqlx.ExecerContext, token, id string, delay time.Duration, maxAttempts int, deadline time.Duration) (string, error) {
	const qFail = `UPDATE outbox_events
SET status = 'failed', claim_token = NULL, lease_until = NULL
WHERE event_id = ? AND status = 'sending' AND claim_token = ?
  AND (attempts >= ? OR first_attempt_at <= TIMESTAMPADD(MICROSECOND, ?, NOW(6)))`
	res, err := db.ExecContext(ctx, qFail, id, token, maxAttempts, -deadline.Microseconds())
	if failed, err := sqldb.Changed(res, err, "mark %s failed", id); err != nil || failed {
		return StatusFailed, err
	}
	const qRetry = `UPDATE outbox_events
SET status = 'pending', next_attempt_at = TIMESTAMPADD(MICROSECOND, ?, NOW(6)),
    claim_token = NULL, lease_until = NULL
WHERE event_id = ? AND status = 'sending' AND claim_token = ?`
	res, err = db.ExecContext(ctx, qRetry, delay.Microseconds(), id, token)
	if ours, err := sqldb.Changed(res, err, "mark %s pending", id); err != nil || !ours {
		return "", err
	}
	return StatusPending, nil
}

// renewLease extends the lease of the rows we still hold.
func renewLease(ctx context.Context, db sqlx.ExecerContext, token string, ids []string, lease time.Duration) (int64, error) {
	const q = `UPDATE outbox_events
SET lease_until = TIMESTAMPADD(MICROSECOND, ?, NOW(6))
WHERE event_id IN (?) AND status = 'sending' AND claim_token = ?`
	res, err := sqldb.ExecIn(ctx, db, q, lease.Microseconds(), ids, token)
	if err != nil {
		return 0, fmt.Errorf("renew lease: %w", err)
	}
	return res.RowsAffected()
}

// lockExpired locks up to limit rows whose lease expired (by database
// time), inside the caller's transaction, so that each can be released like
// a failed attempt under the token it was claimed with. SKIP LOCKED leaves
// rows another recovery or their claimant is working on; the holder's
// late mark then waits for this transaction and finds its token gone.
func lockExpired(ctx context.Context, tx *sqlx.Tx, limit int) ([]claimed, error) {
	const q = `SELECT event_id, aggregate_id, aggregate_version, event_type, schema_version,
       payload, attempts, created_at, traceparent, claim_token
FROM outbox_events
WHERE status = 'sending' AND lease_until < NOW(6)
LIMIT ?
FOR UPDATE SKIP LOCKED`
	var rows []claimed
	if err := tx.SelectContext(ctx, &rows, q, limit); err != nil {
		return nil, fmt.Errorf("lock expired leases: %w", err)
	}
	return rows, nil
}

// anyDue is the fallback poll: one cheap indexed read, so an idle
// dispatcher costs one query per poll interval.
func anyDue(ctx context.Context, db sqlx.QueryerContext) (bool, error) {
	const q = `SELECT EXISTS (
  SELECT 1 FROM outbox_events WHERE status = 'pending' AND next_attempt_at <= NOW(6)
)`
	var due bool
	if err := sqlx.GetContext(ctx, db, &due, q); err != nil && err != sql.ErrNoRows {
		return false, fmt.Errorf("poll outbox: %w", err)
	}
	return due, nil
}
