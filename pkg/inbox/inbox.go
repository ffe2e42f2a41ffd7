package inbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/instance"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
)

// Table is the inbox table, for callers that must name it (metric labels,
// the lab's reports). Only this package reads or writes it.
const Table = "consumer_inbox"

// ErrAlreadyProcessed means this consumer already committed this event: roll
// back the attempt and ACK the message.
var ErrAlreadyProcessed = errors.New("event already processed by this consumer")

// ErrPayloadMismatch means this consumer already committed this event_id
// with a different payload. It is not "already processed": one of the two
// messages is wrong (a producer bug, a reused id), so the new one goes to
// dead letters with an alert and nothing is applied.
var ErrPayloadMismatch = errors.New("same event_id, different payload")

// PayloadHash is the hex SHA-256 of a message body, as stored in
// consumer_inbox.payload_sha256. A JSON body is hashed in canonical form
// (object keys sorted, no insignificant whitespace, numbers as written), so
// a copy re-encoded on the way (pretty-printed by a tool, keys reordered by
// a JSON column) is still the same payload; anything else is hashed as is.
func PayloadHash(payload []byte) string {
	sum := sha256.Sum256(canonicalJSON(payload))
	return hex.EncodeToString(sum[:])
}

func canonicalJSON(p []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.UseNumber() // no float rounding: a number keeps its literal
	var v any
	if err := dec.Decode(&v); err != nil {
		return p
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return p // trailing data: not one JSON value
	}
	if out, err := json.Marshal(v); err == nil { // map keys sorted
		return out
	}
	return p
}

// ClaimPayload records that consumer processes eventID, inside tx, before
// the business change, with the SHA-256 of payload. It must be a plain
// INSERT: the primary key (consumer_name, event_id) is what coordinates two
// deliveries racing on one event; the second blocks until the first
// commits (then gets a duplicate key) or rolls back (then it proceeds).
// INSERT IGNORE would hide other errors and, outside strict mode, truncate
// a long id. Only the duplicate key of this statement means "already
// processed": any other error, a business duplicate key included, fails
// the attempt. On that duplicate key the stored hash is compared with this
// payload's: equal (or NULL, a row from before the hash existed) is
// ErrAlreadyProcessed; different is ErrPayloadMismatch.
func ClaimPayload(ctx context.Context, tx *sqlx.Tx, consumer, eventID string, payload []byte) error {
	return claim(ctx, tx, consumer, eventID, payload)
}

func claim(ctx context.Context, tx *sqlx.Tx, consumer, eventID string, payload []byte) error {
	err := insertClaims(ctx, tx, consumer, []claimRow{{eventID, payload}})
	switch {
	case err == nil:
		return nil
	case !sqldb.IsDuplicateKey(err):
		return fmt.Errorf("inbox claim %s/%s: %w", consumer, eventID, err)
	}
	// The duplicate key means the other row is committed (an uncommitted one
	// would have made us wait), so a plain read in this transaction sees it.
	_, stored, err := lookup(ctx, tx, consumer, eventID)
	if err != nil {
		return err
	}
	return compare(stored, payload)
}

// claimRow is one inbox row to insert: the event and its payload.
type claimRow struct {
	eventID string
	payload []byte
}

// ClaimAll is ClaimPayload for several events in one statement: a consumer
// batch's inbox rows (pkg/inbox/batch). Any error, a duplicate key
// included, is returned as it is: which event was processed already is
// for ClaimPayload, one event at a time, to find out.
func ClaimAll(ctx context.Context, tx *sqlx.Tx, consumer string, es []events.Envelope) error {
	rows := make([]claimRow, len(es))
	for i, e := range es {
		rows[i] = claimRow{e.EventID, e.Payload}
	}
	if err := insertClaims(ctx, tx, consumer, rows); err != nil {
		return fmt.Errorf("inbox claim of %d events for %s: %w", len(es), consumer, err)
	}
	return nil
}

// insertClaims inserts the inbox rows of consumer in one statement, each
// naming the instance that applies it.
func insertClaims(ctx context.Context, tx *sqlx.Tx, consumer string, rows []claimRow) error {
	const q = `INSERT INTO consumer_inbox (consumer_name, event_id, payload_sha256, instance) VALUES `
	args := make([]any, 0, 4*len(rows))
	inst := instance.ID(ctx)
	for _, r := range rows {
		args = append(args, consumer, r.eventID, PayloadHash(r.payload), inst)
	}
	_, err := tx.ExecContext(ctx, q+sqldb.Values("(?, ?, ?, NULLIF(?, ''))", len(rows)), args...)
	return err
}

// compare turns a stored hash into the answer for a duplicate.
func compare(stored sql.NullString, payload []byte) error {
	if !stored.Valid || stored.String == PayloadHash(payload) {
		return ErrAlreadyProcessed
	}
	return ErrPayloadMismatch
}

// Seen answers for an event before any transaction: nil when consumer has
// not committed eventID, ErrAlreadyProcessed when it has with the same
// payload (or a row without a hash), ErrPayloadMismatch when it has with
// another payload.
func Seen(ctx context.Context, db sqlx.QueryerContext, consumer, eventID string, payload []byte) error {
	found, stored, err := lookup(ctx, db, consumer, eventID)
	if err != nil || !found {
		return err
	}
	return compare(stored, payload)
}

func lookup(ctx context.Context, db sqlx.QueryerContext, consumer, eventID string) (bool, sql.NullString, error) {
	const q = `SELECT payload_sha256 FROM consumer_inbox WHERE consumer_name = ? AND event_id = ?`
	var hash sql.NullString
	err := sqlx.GetContext(ctx, db, &hash, q, consumer, eventID)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, hash, nil
	case err != nil:
		return false, hash, fmt.Errorf("inbox lookup: %w", err)
	}
	return true, hash, nil
}

// Committed reports which of the events consumer has an inbox row for: one
// read for several events (a consumer batch), where Seen is one per event.
func Committed(ctx context.Context, db sqlx.QueryerContext, consumer string, eventIDs []string) (map[string]bool, error) {
	const q = `SELECT event_id FROM consumer_inbox WHERE consumer_name = ? AND event_id IN (?)`
	var found []string
	if err := sqldb.SelectIn(ctx, db, &found, q, consumer, eventIDs); err != nil {
		return nil, fmt.Errorf("inbox lookup of %d events: %w", len(eventIDs), err)
	}
	out := make(map[string]bool, len(found))
	for _, id := range found {
		out[id] = true
	}
	return out, nil
}

// Row is one processed event: the chapter's three columns.
type Row struct {
	Consumer    string    `db:"consumer_name" json:"consumer"`
	EventID     string    `db:"event_id" json:"event_id"`
	ProcessedAt time.Time `db:"processed_at" json:"processed_at"`
	Instance    *string   `db:"instance" json:"instance"` // INSTANCE_ID of the consumer that applied it
}

// Rows returns every consumer's inbox rows of these events, in processing
// order: who applied what, for the admin API and the order timeline.
func Rows(ctx context.Context, db sqlx.QueryerContext, eventIDs []string) ([]Row, error) {
	rows := []Row{}
	if len(eventIDs) == 0 {
		return rows, nil
	}
	const q = `SELECT consumer_name, event_id, processed_at, instance FROM consumer_inbox
WHERE event_id IN (?) ORDER BY processed_at`
	if err := sqldb.SelectIn(ctx, db, &rows, q, eventIDs); err != nil {
		return nil, fmt.Errorf("inbox rows: %w", err)
	}
	return rows, nil
}

// DeleteExpired deletes up to limit inbox rows processed more than window
// ago (database time), oldest first, and returns how many it deleted: one
// short autocommit statement on the processed_at index, safe to run from
// several instances at once. pkg/retention calls it in batches. A row
// deleted inside the window would let a replay apply its event twice, which
// is why the window must cover every way an old message can come back, and
// why consumers refuse older events (ErrTooOld).
func DeleteExpired(ctx context.Context, db sqlx.ExecerContext, window time.Duration, limit int) (int64, error) {
	const q = `DELETE FROM consumer_inbox
WHERE processed_at < TIMESTAMPADD(MICROSECOND, ?, NOW(6))
ORDER BY processed_at
LIMIT ?`
	res, err := db.ExecContext(ctx, q, -window.Microseconds(), limit)
	if err == nil {
		var n int64
		if n, err = res.RowsAffected(); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("delete expired inbox rows: %w", err)
}
