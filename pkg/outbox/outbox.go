package outbox

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/sqldb"
	"github.com/relmsg/ordersaga/pkg/tracing"
)

// Event is one event to write, in the caller's transaction.
type Event struct {
	EventID          string // empty: a new UUID is made here, once; re-sends keep it
	AggregateID      uint64
	AggregateVersion uint64 // assigned by the caller in the same transaction as the change
	Type             events.Type
	SchemaVersion    int // 0 means events.CurrentSchemaVersion
	Payload          any // marshalled to JSON; json.RawMessage passes through
}

// Add writes events into outbox_events on the caller's transaction, so the
// events exist if and only if the business change commits (the chapter's
// "same connection, same transaction"). It returns the event ids. After the
// commit, call Dispatcher.Wake so the events leave within milliseconds.
func Add(ctx context.Context, tx *sqlx.Tx, evs ...Event) ([]string, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	// The trace of the request or message being handled travels with the
	// events it causes (pkg/tracing).
	var trace any
	if tp := tracing.From(ctx); tracing.Valid(tp) {
		trace = tp
	}
	rows := make([][]any, len(evs))
	ids := make([]string, len(evs))
	for i, e := range evs {
		if e.EventID == "" {
			// UUIDv7 is time ordered: new primary keys land at the end of
			// the clustered index instead of splitting random pages.
			id, err := uuid.NewV7()
			if err != nil {
				return nil, fmt.Errorf("outbox: new event id: %w", err)
			}
			e.EventID = id.String()
		}
		if e.SchemaVersion == 0 {
			e.SchemaVersion = events.CurrentSchemaVersion
		}
		if e.Type == "" || e.AggregateID == 0 || e.AggregateVersion == 0 {
			return nil, fmt.Errorf("outbox: event %q needs a type, an aggregate id and a version", e.EventID)
		}
		payload, err := marshal(e.Payload)
		if err != nil {
			return nil, fmt.Errorf("outbox: payload of %s: %w", e.Type, err)
		}
		rows[i] = []any{e.EventID, e.AggregateID, e.AggregateVersion, e.Type, e.SchemaVersion, payload, trace}
		ids[i] = e.EventID
	}
	if c, ok := ctx.Value(collectKey{}).(*Collected); ok && c.tx == tx {
		c.rows = append(c.rows, rows...)
		return ids, nil
	}
	if err := insert(ctx, tx, rows); err != nil {
		return nil, err
	}
	return ids, nil
}

// insert writes rows (Add's columns) in one statement.
func insert(ctx context.Context, tx *sqlx.Tx, rows [][]any) error {
	const q = `INSERT INTO outbox_events
  (event_id, aggregate_id, aggregate_version, event_type, schema_version, payload, traceparent)
VALUES `
	args := make([]any, 0, 7*len(rows))
	for _, r := range rows {
		args = append(args, r...)
	}
	if _, err := tx.ExecContext(ctx, q+sqldb.Values("(?, ?, ?, ?, ?, ?, ?)", len(rows)), args...); err != nil {
		return fmt.Errorf("outbox: insert %d events: %w", len(rows), err)
	}
	return nil
}

// Collected holds the events that Add kept in memory under Collect.
type Collected struct {
	tx   *sqlx.Tx
	rows [][]any
}

type collectKey struct{}

// Collect returns a collector for tx: under a context from its Context,
// Add on tx keeps the events instead of inserting them, and Flush writes
// them all in one INSERT before the COMMIT. A consumer batch (pkg/inbox)
// uses it, so its events' results cost one statement together. Only for a
// transaction that never rolls back to a savepoint taken before an Add:
// the kept rows would not be undone with it.
func Collect(tx *sqlx.Tx) *Collected { return &Collected{tx: tx} }

// Context returns ctx with c in it.
func (c *Collected) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, collectKey{}, c)
}

// Flush writes the kept events, if any, in one INSERT on their transaction.
func (c *Collected) Flush(ctx context.Context) error {
	if len(c.rows) == 0 {
		return nil
	}
	err := insert(ctx, c.tx, c.rows)
	c.rows = nil
	return err
}

func marshal(p any) ([]byte, error) {
	switch v := p.(type) {
	case json.RawMessage:
		if !json.Valid(v) {
			return nil, fmt.Errorf("invalid JSON")
		}
		return v, nil
	case nil:
		return nil, fmt.Errorf("no payload")
	default:
		return json.Marshal(v)
	}
}
