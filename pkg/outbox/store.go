package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/sqldb"
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
       payload, attempts, created_at, traceparent
FROM outbox_events
WHERE status = 'pending' AND next_attempt_at <= NOW(6)
ORDER BY next_attempt_at, created_at
LIMIT ?
FOR UPDATE SKIP LOCKED`
	// The IN list is built for exactly the selected ids; "status = 'pending'"
	// restates what must still be true.
	const qUpdate = `UPDATE outbox_events
SET status = 'sending', claim_token = ?,
    lease_until = TIMESTAMPADD(MICROSECOND, ?, NOW(6)),
    attempts = attempts + 1
WHERE event_id IN (%s) AND status = 'pending'`

	token = uuid.NewString()
	err = sqldb.WithTx(ctx, db, func(tx *sqlx.Tx) error {
		rows = rows[:0]
		if err := tx.SelectContext(ctx, &rows, qSelect, limit); err != nil {
			return fmt.Errorf("select due events: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		ids := make([]any, 0, len(rows)+2)
		ids = append(ids, token, lease.Microseconds())
		for _, r := range rows {
			ids = append(ids, r.EventID)
		}
		res, err := tx.ExecContext(ctx, fmt.Sprintf(qUpdate, placeholders(len(rows))), ids...)
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
WHERE event_id IN (%s) AND status = 'sending' AND claim_token = ?`
	args := make([]any, 0, len(ids)+1)
	for _, id := range ids {
		args = append(args, id)
	}
	args = append(args, token)
	res, err := db.ExecContext(ctx, fmt.Sprintf(q, placeholders(len(ids))), args...)
	if err != nil {
		return 0, fmt.Errorf("mark sent: %w", err)
	}
	return res.RowsAffected()
}

// markRetry hands one event back after a failed publish: to 'pending' with
// a later next_attempt_at, or to 'failed' (kept, alerted on, never deleted)
// once its attempts are used up. Under our claim token only, like markSent.
// It reports whether the row was still ours.
func markRetry(ctx context.Context, db sqlx.ExecerContext, token, id, status string, delay time.Duration) (bool, error) {
	const q = `UPDATE outbox_events
SET status = ?, next_attempt_at = TIMESTAMPADD(MICROSECOND, ?, NOW(6)),
    claim_token = NULL, lease_until = NULL
WHERE event_id = ? AND status = 'sending' AND claim_token = ?`
	res, err := db.ExecContext(ctx, q, status, delay.Microseconds(), id, token)
	if err != nil {
		return false, fmt.Errorf("mark %s: %w", status, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// renewLease extends the lease of the rows we still hold.
func renewLease(ctx context.Context, db sqlx.ExecerContext, token string, ids []string, lease time.Duration) (int64, error) {
	const q = `UPDATE outbox_events
SET lease_until = TIMESTAMPADD(MICROSECOND, ?, NOW(6))
WHERE event_id IN (%s) AND status = 'sending' AND claim_token = ?`
	args := make([]any, 0, len(ids)+2)
	args = append(args, lease.Microseconds())
	for _, id := range ids {
		args = append(args, id)
	}
	args = append(args, token)
	res, err := db.ExecContext(ctx, fmt.Sprintf(q, placeholders(len(ids))), args...)
	if err != nil {
		return 0, fmt.Errorf("renew lease: %w", err)
	}
	return res.RowsAffected()
}

// recoverExpired returns up to limit rows whose lease expired (by database
// time) to 'pending' so any dispatcher can claim them again; rows that used
// up their attempts become 'failed'. The WHERE repeats the expiry test, so a
// row renewed or marked in the meantime is left alone.
func recoverExpired(ctx context.Context, db sqlx.ExecerContext, limit, maxAttempts int) (int64, error) {
	const q = `UPDATE outbox_events
SET status = IF(attempts >= ?, 'failed', 'pending'),
    claim_token = NULL, lease_until = NULL, next_attempt_at = NOW(6)
WHERE status = 'sending' AND lease_until < NOW(6)
LIMIT ?`
	res, err := db.ExecContext(ctx, q, maxAttempts, limit)
	if err != nil {
		return 0, fmt.Errorf("recover expired leases: %w", err)
	}
	return res.RowsAffected()
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

func placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?, ", n-1) + "?"
}
