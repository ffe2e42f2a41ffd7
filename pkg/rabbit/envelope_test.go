package rabbit_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// delivery is m as a consumer receives it.
func delivery(m rabbit.Message) rabbit.Delivery {
	return rabbit.Delivery{Queue: "q", Attempt: 1, Delivery: amqp.Delivery{
		MessageId: m.Publishing.MessageId, Type: m.Publishing.Type, ContentType: m.Publishing.ContentType,
		Timestamp: m.Publishing.Timestamp, Headers: m.Publishing.Headers, Body: m.Publishing.Body}}
}

// An envelope survives the trip through the message: a plain event
// carries no corrects_event_id header, a correction carries the id of the
// event it corrects, and the consumer reads it back.
func TestEnvelopeCarriesTheCorrectedEventID(t *testing.T) {
	t.Parallel()
	original := uuid.NewString()
	for _, tc := range []struct {
		name     string
		corrects string
	}{
		{"a plain event", ""},
		{"a correction", original},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := events.Envelope{EventID: uuid.NewString(), Type: events.OrderConfirmed, AggregateID: 7,
				AggregateVersion: 4, SchemaVersion: 1, CorrelationID: "7", OccurredAt: time.Now().UTC().Truncate(time.Second),
				Payload: []byte(`{"order_id":"7"}`), CorrectsEventID: tc.corrects}
			m := rabbit.FromEnvelope("saga.events", e)
			h, present := m.Publishing.Headers[events.HeaderCorrectsEventID]
			if present != (tc.corrects != "") || (present && h != tc.corrects) {
				t.Fatalf("header %s = %v (present %v), want %q", events.HeaderCorrectsEventID, h, present, tc.corrects)
			}
			got, err := delivery(m).Envelope()
			if err != nil {
				t.Fatalf("Envelope: %v", err)
			}
			if got.EventID != e.EventID || got.CorrectsEventID != tc.corrects {
				t.Fatalf("read back event %s correcting %q, want %s correcting %q", got.EventID, got.CorrectsEventID, e.EventID, tc.corrects)
			}
		})
	}
}

// A corrects_event_id that is not another event's UUID makes the message
// invalid (a dead letter), rather than losing the relation silently.
func TestMalformedCorrectsHeaderIsInvalid(t *testing.T) {
	t.Parallel()
	id := uuid.NewString()
	for name, v := range map[string]any{
		"not a uuid":   "order-7",
		"not a string": int64(7),
		"its own id":   id,
		"empty":        "",
	} {
		t.Run(name, func(t *testing.T) {
			m := rabbit.FromEnvelope("saga.events", events.Envelope{EventID: id, Type: events.OrderConfirmed,
				AggregateID: 7, AggregateVersion: 4, SchemaVersion: 1, Payload: []byte(`{"order_id":"7"}`)})
			m.Publishing.Headers[events.HeaderCorrectsEventID] = v
			if _, err := delivery(m).Envelope(); !errors.Is(err, events.ErrInvalid) {
				t.Fatalf("Envelope with %s = %v: %v, want events.ErrInvalid", events.HeaderCorrectsEventID, v, err)
			}
		})
	}
}
