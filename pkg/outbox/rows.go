package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/sqldb"
)

// Table is the outbox table, for callers that must name it (the retention
// job's metric label, the lab's reports). Only this package reads or writes
// it; everyone else uses the functions below.
const Table = "outbox_events"

// The statuses of an outbox row.
const (
	StatusPending = "pending" // due at next_attempt_at
	StatusSending = "sending" // claimed under a claim token until lease_until
	StatusSent    = "sent"    // confirmed by the broker
	StatusFailed  = "failed"  // attempts used up: kept for an operator
)

// Statuses lists every status, in the order a row moves through them.
var Statuses = []string{StatusPending, StatusSending, StatusSent, StatusFailed}

// Row is one outbox event as operators, the reconciler and the order
// timeline see it.
type Row struct {
	EventID          string `db:"event_id" json:"event_id"`
	AggregateID      uint64 `db:"aggregate_id" json:"aggregate_id,string"`
	AggregateVersion uint64 `db:"aggregate_version" json:"aggregate_version"`
	EventType        string `db:"event_type" json:"event_type"`
	Status           string `db:"status" json:"status"`
	Attempts         int    `db:"attempts" json:"attempts"` // in the current round
	// The history, never reset: every attempt, and the rounds started again
	// by an operator's retry or the reconciler's re-send (Requeue).
	TotalAttempts int        `db:"total_attempts" json:"total_attempts"`
	Requeues      int        `db:"requeues" json:"requeues"`
	NextAttemptAt time.Time  `db:"next_attempt_at" json:"next_attempt_at"`
	ClaimToken    *string    `db:"claim_token" json:"claim_token"`
	LeaseUntil    *time.Time `db:"lease_until" json:"lease_until"`
	CreatedAt     time.Time  `db:"created_at" json:"created_at"`
	SentAt        *time.Time `db:"sent_at" json:"sent_at"`
	// ClaimedBy is the INSTANCE_ID of the dispatcher that claimed the row
	// last: once sent, the one that sent it.
	ClaimedBy *string `db:"claimed_by" json:"claimed_by"`
	// FirstAttemptAt starts the deadline of the current round of attempts.
	FirstAttemptAt *time.Time `db:"first_attempt_at" json:"first_attempt_at"`
	// CorrectsEventID is the event this one corrects (Event.Corrects); nil
	// for every event that is not a correction.
	CorrectsEventID *string `db:"corrects_event_id" json:"corrects_event_id,omitempty"`
	// Payload is left out by OfAggregate (empty here).
	Payload json.RawMessage `db:"payload" json:"payload,omitempty"`
}

const rowColumns = `event_id, aggregate_id, aggregate_version, event_type, status, attempts, next_attempt_at,
  claim_token, lease_until, created_at, sent_at, first_attempt_at, total_attempts, requeues, claimed_by,
  corrects_event_id`

// Filter selects outbox rows for List: every field set must match.
type Filter struct {
	AggregateID uint64 // 0: every aggregate
	Status      string // "": every status
	Limit       int    // required: at most this many rows
}

// List returns the rows f selects, with their payloads, oldest first.
func List(ctx context.Context, db sqlx.QueryerContext, f Filter) ([]Row, error) {
	if f.Limit <= 0 {
		return nil, fmt.Errorf("list outbox rows: a limit is required")
	}
	q := `SELECT ` + rowColumns + `, payload FROM outbox_events WHERE 1 = 1`
	var args []any
	if f.AggregateID != 0 {
		q += ` AND aggregate_id = ?`
		args = append(args, f.AggregateID)
	}
	if f.Status != "" {
		q += ` AND status = ?`
		args = append(args, f.Status)
	}
	q += ` ORDER BY created_at, event_id LIMIT ?`
	args = append(args, f.Limit)
	rows := []Row{}
	if err := sqlx.SelectContext(ctx, db, &rows, q, args...); err != nil {
		return nil, fmt.Errorf("list outbox rows: %w", err)
	}
	return rows, nil
}

// OfAggregate returns every row of one aggregate, in version order, without
// the payloads: what the reconciler and the timeline compare and show.
func OfAggregate(ctx context.Context, db sqlx.QueryerContext, aggregateID uint64) ([]Row, error) {
	const q = `SELECT ` + rowColumns + ` FROM outbox_events WHERE aggregate_id = ? ORDER BY aggregate_version, created_at`
	rows := []Row{}
	if err := sqlx.SelectContext(ctx, db, &rows, q, aggregateID); err != nil {
		return nil, fmt.Errorf("outbox of aggregate %d: %w", aggregateID, err)
	}
	return rows, nil
}

// Summary is the operator's first look at the outbox.
type Summary struct {
	ByStatus         map[string]int64 `json:"by_status"`                  // every status, zeros included
	OldestPendingAge float64          `json:"oldest_pending_age_seconds"` // 0 when nothing is pending
}

// Summarize counts the rows by status and measures the age of the oldest
// pending event (database time), the chapter's first alarm.
func Summarize(ctx context.Context, db sqlx.QueryerContext) (Summary, error) {
	counts, err := countByStatus(ctx, db, Statuses...)
	if err != nil {
		return Summary{}, err
	}
	age, err := oldestPendingAge(ctx, db)
	if err != nil {
		return Summary{}, err
	}
	return Summary{ByStatus: counts, OldestPendingAge: age.Seconds()}, nil
}

// countByStatus returns the number of rows in each of statuses (zeros
// included).
func countByStatus(ctx context.Context, db sqlx.QueryerContext, statuses ...string) (map[string]int64, error) {
	q, args, err := sqlx.In(`SELECT status, COUNT(*) AS n FROM outbox_events WHERE status IN (?) GROUP BY status`, statuses)
	if err != nil {
		return nil, err
	}
	var rows []struct {
		Status string `db:"status"`
		N      int64  `db:"n"`
	}
	if err := sqlx.SelectContext(ctx, db, &rows, q, args...); err != nil {
		return nil, fmt.Errorf("count outbox rows: %w", err)
	}
	counts := make(map[string]int64, len(statuses))
	for _, s := range statuses {
		counts[s] = 0
	}
	for _, r := range rows {
		counts[r.Status] = r.N
	}
	return counts, nil
}

func oldestPendingAge(ctx context.Context, db sqlx.QueryerContext) (time.Duration, error) {
	const q = `SELECT COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6)), 0)
FROM outbox_events WHERE status = 'pending'`
	var micros int64
	if err := sqlx.GetContext(ctx, db, &micros, q); err != nil {
		return 0, fmt.Errorf("oldest pending outbox row: %w", err)
	}
	return time.Duration(micros) * time.Microsecond, nil
}

// Requeue puts one event back to pending, due now, keeping its event_id, if
// its status is one of from; it reports whether it did (false: the row
// moved meanwhile, e.g. a dispatcher claimed it, or it was never in from).
// A row that was not pending gets a fresh round of attempts (its history
// stays: total_attempts, and requeues counts the round), and any claim is
// dropped; its deadline starts again at its next attempt. Re-sending a
// sent event overwrites its sent_at when it is sent again.
//
// A requeue is a replay, never a correction: no new row and no new id,
// because it sends the same fact again, and a consumer that already
// applied it must drop the copy by its inbox (the chapter: 重投仍使用原事件
// ID). Uses: an operator's retry of a failed event (from = StatusFailed)
// and the reconciler's republish and resend, which send an event that did
// not reach a participant or was not processed there. A decision to have
// an event applied again where it was processed is a correction: a new
// event whose Corrects names this one (Add).
func Requeue(ctx context.Context, db sqlx.ExecerContext, eventID string, from ...string) (bool, error) {
	q, args, err := sqlx.In(`UPDATE outbox_events
SET attempts = IF(status = 'pending', attempts, 0), -- before status changes: SET runs left to right
    first_attempt_at = IF(status = 'pending', first_attempt_at, NULL),
    requeues = requeues + IF(status = 'pending', 0, 1),
    status = 'pending', next_attempt_at = NOW(6), claim_token = NULL, lease_until = NULL
WHERE event_id = ? AND status IN (?)`, eventID, from)
	if err != nil {
		return false, err
	}
	res, err := db.ExecContext(ctx, q, args...)
	return sqldb.Changed(res, err, "requeue event %s", eventID)
}
