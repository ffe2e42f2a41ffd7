package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"go.opentelemetry.io/otel/trace"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/tracing"
)

// Event is one event to write, in the caller's transaction.
type Event struct {
	EventID          string // empty: a new UUID is made here, once; re-sends keep it
	AggregateID      uint64
	AggregateVersion uint64 // assigned by the caller in the same transaction as the change
	Type             events.Type
	SchemaVersion    int // 0 means events.CurrentSchemaVersion
	Payload          any // marshalled to JSON; json.RawMessage passes through
	// Parent is the span that caused the event, which its create span
	// continues; zero: the span of the ctx given to Add. Set when one Add
	// writes the events of several messages (a consumer batch), each
	// caused by its own message's process span.
	Parent trace.SpanContext
	// Corrects is set on a correction only: the event_id of the event it
	// corrects, stored in corrects_event_id and sent as the header of that
	// name. A correction is a new decision about an event already issued
	// (asked again after a status query found nothing, applied again after
	// a participant recorded the first without its effect), so it is a new
	// event with an id of its own, which a consumer's inbox takes as new.
	// A replay of the same fact is not written again at all: Requeue puts
	// the same row, same event_id, back to pending.
	Corrects string
}

// NewEventID makes an event id the way Add does, for a caller that needs
// the id before the event is written (kept on a row as its latest
// request). UUIDv7 is time ordered: new primary keys land at the end of the
// clustered index instead of splitting random pages.
func NewEventID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("new event id: %w", err)
	}
	return id.String(), nil
}

// Add writes events into outbox_events on the caller's transaction, so the
// events exist if and only if the business change commits (the chapter's
// "same connection, same transaction"). It returns the event ids. After the
// commit, call Dispatcher.Wake so the events leave within milliseconds. All
// of evs go in one INSERT: a consumer batch (pkg/inbox/batch) hands over the
// result events of its whole transaction at once.
//
// Each event gets a create span (pkg/base/tracing), child of its Parent or of
// ctx's span; the span's context is the event's creation context, stored
// in the traceparent column and sent as the message's traceparent header,
// so the consumers' spans continue this trace and link to this span.
func Add(ctx context.Context, tx *sqlx.Tx, evs ...Event) ([]string, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	rows := make([][]any, len(evs))
	ids := make([]string, len(evs))
	spans := make([]trace.Span, 0, len(evs))
	defer func() {
		for _, s := range spans {
			s.End()
		}
	}()
	for i, e := range evs {
		if e.EventID == "" {
			id, err := NewEventID()
			if err != nil {
				return nil, fmt.Errorf("outbox: %w", err)
			}
			e.EventID = id
		}
		if e.SchemaVersion == 0 {
			e.SchemaVersion = events.CurrentSchemaVersion
		}
		if e.Type == "" || e.AggregateID == 0 || e.AggregateVersion == 0 {
			return nil, fmt.Errorf("outbox: event %q needs a type, an aggregate id and a version", e.EventID)
		}
		var corrects any
		if e.Corrects != "" {
			if _, err := uuid.Parse(e.Corrects); err != nil || len(e.Corrects) != 36 || e.Corrects == e.EventID {
				return nil, fmt.Errorf("outbox: event %q corrects %q, which is not the id of another event", e.EventID, e.Corrects)
			}
			corrects = e.Corrects
		}
		payload, err := marshal(e.Payload)
		if err != nil {
			return nil, fmt.Errorf("outbox: payload of %s: %w", e.Type, err)
		}
		span := tracing.StartCreate(ctx, e.Parent, tracing.Message{ID: e.EventID, RoutingKey: e.Type,
			ConversationID: strconv.FormatUint(e.AggregateID, 10)})
		spans = append(spans, span)
		var tp any // NULL without a trace
		if s := tracing.Format(span.SpanContext()); s != "" {
			tp = s
		}
		rows[i] = []any{e.EventID, e.AggregateID, e.AggregateVersion, e.Type, e.SchemaVersion, payload, tp, corrects}
		ids[i] = e.EventID
	}
	const q = `INSERT INTO outbox_events
  (event_id, aggregate_id, aggregate_version, event_type, schema_version, payload, traceparent, corrects_event_id)
VALUES `
	args := make([]any, 0, 8*len(rows))
	for _, r := range rows {
		args = append(args, r...)
	}
	if _, err := tx.ExecContext(ctx, q+sqldb.Values("(?, ?, ?, ?, ?, ?, ?, ?)", len(rows)), args...); err != nil {
		for _, s := range spans {
			tracing.Fail(s, "insert", err)
		}
		return nil, fmt.Errorf("outbox: insert %d events: %w", len(rows), err)
	}
	return ids, nil
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
