package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/events"
)

// The messaging tables (outbox, inbox) of a service, read through its
// admin endpoints.

// OutboxRow is one outbox row.
type OutboxRow struct {
	EventID          string          `json:"event_id"`
	AggregateID      string          `json:"aggregate_id"`
	AggregateVersion uint64          `json:"aggregate_version"`
	EventType        string          `json:"event_type"`
	Status           string          `json:"status"`
	Attempts         int             `json:"attempts"`
	TotalAttempts    int             `json:"total_attempts"`
	NextAttemptAt    time.Time       `json:"next_attempt_at"`
	FirstAttemptAt   *time.Time      `json:"first_attempt_at"`
	ClaimToken       *string         `json:"claim_token"`
	LeaseUntil       *time.Time      `json:"lease_until"`
	CreatedAt        time.Time       `json:"created_at"`
	SentAt           *time.Time      `json:"sent_at"`
	Payload          json.RawMessage `json:"payload"`
}

func (l *Lab) outbox(ctx context.Context, svc, orderID string) ([]OutboxRow, error) {
	var out struct {
		Events []OutboxRow `json:"events"`
	}
	return out.Events, l.get(ctx, svc, "/admin/outbox?aggregate_id="+orderID, &out)
}

func (l *Lab) outboxEvent(ctx context.Context, svc, orderID, typ string) (OutboxRow, error) {
	rows, err := l.outbox(ctx, svc, orderID)
	if err != nil {
		return OutboxRow{}, err
	}
	for _, r := range rows {
		if r.EventType == typ {
			return r, nil
		}
	}
	return OutboxRow{}, fmt.Errorf("no %s event for order %s in the %s outbox", typ, orderID, svc)
}

// InboxRow is one processed event.
type InboxRow struct {
	Consumer    string    `json:"consumer"`
	EventID     string    `json:"event_id"`
	ProcessedAt time.Time `json:"processed_at"`
}

func (l *Lab) inbox(ctx context.Context, svc string, ids []string) ([]InboxRow, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var out struct {
		Inbox []InboxRow `json:"inbox"`
	}
	return out.Inbox, l.get(ctx, svc, "/admin/inbox?event_id="+url.QueryEscape(strings.Join(ids, ",")), &out)
}

// EnvelopeOf rebuilds the envelope of an outbox row, to publish it again
// with its original event_id (a copy: what a re-send or a redelivery is).
func EnvelopeOf(r OutboxRow) events.Envelope {
	var id uint64
	fmt.Sscan(r.AggregateID, &id)
	return events.Envelope{EventID: r.EventID, Type: r.EventType, AggregateID: id,
		AggregateVersion: r.AggregateVersion, SchemaVersion: events.CurrentSchemaVersion,
		CorrelationID: r.AggregateID, OccurredAt: r.CreatedAt, Payload: r.Payload}
}
