package rabbit

import (
	"fmt"
	"strconv"

	"github.com/google/uuid"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/tracing"
)

// Envelope reads the event metadata of a delivery. A message without a UUID
// message_id, a type or the contract's headers is invalid
// (events.ErrInvalid): it can never be processed and goes to dead letters;
// so is one whose optional corrects_event_id header is not another event's
// UUID.
func (d Delivery) Envelope() (events.Envelope, error) {
	e := events.Envelope{
		EventID:    d.MessageId,
		Type:       d.Type,
		OccurredAt: d.Timestamp,
		Payload:    d.Body,
	}
	if _, err := uuid.Parse(d.MessageId); err != nil || len(d.MessageId) != 36 {
		return e, fmt.Errorf("%w: message_id %q is not a UUID", events.ErrInvalid, d.MessageId)
	}
	if e.Type == "" {
		return e, fmt.Errorf("%w: message has no type", events.ErrInvalid)
	}
	if d.ContentType != "application/json" {
		return e, fmt.Errorf("%w: content_type %q, want application/json", events.ErrInvalid, d.ContentType)
	}
	var err error
	if e.AggregateID, err = uintHeader(d, events.HeaderAggregateID); err != nil {
		return e, err
	}
	if e.AggregateVersion, err = uintHeader(d, events.HeaderAggregateVersion); err != nil {
		return e, err
	}
	sv, err := uintHeader(d, events.HeaderSchemaVersion)
	if err != nil {
		return e, err
	}
	e.SchemaVersion = int(sv)
	e.CorrelationID, _ = d.Headers[events.HeaderCorrelationID].(string)
	if tp, _ := d.Headers[tracing.Header].(string); tracing.Valid(tp) {
		e.Traceparent = tp
	}
	if v, ok := d.Headers[events.HeaderCorrectsEventID]; ok {
		// Optional, but when present it is the contract's: a UUID other
		// than the message's own id. A producer that writes anything else
		// is broken, and the relation it meant to record would be lost.
		c, _ := v.(string)
		if _, err := uuid.Parse(c); err != nil || len(c) != 36 || c == d.MessageId {
			return e, fmt.Errorf("%w: header %s=%v is not the UUID of another event", events.ErrInvalid, events.HeaderCorrectsEventID, v)
		}
		e.CorrectsEventID = c
	}
	return e, nil
}

func uintHeader(d Delivery, key string) (uint64, error) {
	switch v := d.Headers[key].(type) {
	case string:
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: header %s=%q is not a number", events.ErrInvalid, key, v)
		}
		return n, nil
	case nil:
		return 0, fmt.Errorf("%w: header %s missing", events.ErrInvalid, key)
	default:
		n, ok := IntHeader(d.Headers, key)
		if !ok || n < 0 {
			return 0, fmt.Errorf("%w: header %s has type %T", events.ErrInvalid, key, v)
		}
		return uint64(n), nil
	}
}
