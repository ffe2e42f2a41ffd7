// Package events is the wire contract between the services: event types
// (which are also the routing keys), the headers every message carries, and
// the payload structs. A payload holds the immutable facts a consumer needs
// (order id, items, quantities, amounts) and no personal data beyond the
// opaque customer id.
package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Type is an event type. It doubles as the routing key on the topic exchange.
type Type = string

// The saga's event types.
const (
	OrderCreated   Type = "order.created"
	OrderConfirmed Type = "order.confirmed"
	OrderCancelled Type = "order.cancelled"

	InventoryReserved Type = "inventory.reserved"
	InventoryRejected Type = "inventory.rejected"
	// InventoryReservationExpired: a reservation's lease ran out before the
	// order was confirmed; its stock is available again.
	InventoryReservationExpired Type = "inventory.reservation-expired"
	// InventoryCommitFailed: a confirm arrived for a reservation that had
	// expired and the stock could not be taken again; the order must be
	// cancelled and refunded.
	InventoryCommitFailed Type = "inventory.commit-failed"

	// PaymentChargeRequested is the payment service's message to itself: the
	// charge at the external PSP is driven through its own outbox, so that a
	// crash between "decided to charge" and "charged" is recoverable.
	PaymentChargeRequested Type = "payment.charge-requested"
	PaymentSucceeded       Type = "payment.succeeded"
	PaymentFailed          Type = "payment.failed"
	PaymentRefunded        Type = "payment.refunded"
	// PaymentRefundRequested is the payment service's message to itself to
	// call the PSP's refund, like PaymentChargeRequested.
	PaymentRefundRequested Type = "payment.refund-requested"
)

// Message headers (docs/contract.md, "Messages"). The AMQP message_id is
// the event id and the AMQP type property is the event type.
const (
	HeaderAggregateID      = "aggregate_id"
	HeaderAggregateVersion = "aggregate_version"
	HeaderSchemaVersion    = "schema_version"
	HeaderCorrelationID    = "correlation_id"
	// HeaderCorrectsEventID is set on a correction only: the event_id of the
	// event it corrects. A correction is a new decision about an event
	// already issued (a re-request after a status query, a reconciler's
	// correction, a dead letter sent again with a fixed payload), so it has
	// an event_id of its own and the consumer's inbox takes it as a new
	// event. A replay of the same fact (a re-send, a requeue, a redrive)
	// is not a correction: it keeps its event_id and its headers, and the
	// inbox drops it where it was applied (the chapter, 有限重试与死信: 重投仍使用
	// 原事件 ID；如果确实需要发起新的纠正操作，应分配新事件 ID，并记录它与原事件的关系).
	HeaderCorrectsEventID = "corrects_event_id"
)

// Envelope is one event with its metadata, as written to the outbox and as
// read from a delivery.
type Envelope struct {
	EventID          string // UUID made once when the event is written; never changes on re-send
	Type             Type
	AggregateID      uint64 // the order id for every event in this system
	AggregateVersion uint64 // 1, 2, 3... per aggregate, assigned with the change
	SchemaVersion    int
	CorrelationID    string // the order id, to follow one order across services
	OccurredAt       time.Time
	Payload          json.RawMessage
	Traceparent      string // W3C trace context of the writer, "" if none (pkg/tracing)
	// CorrectsEventID is the event this one corrects (HeaderCorrectsEventID);
	// "" for every event that is not a correction.
	CorrectsEventID string
}

// ErrInvalid marks a payload or envelope that can never be processed: a
// consumer sends it to dead letters instead of retrying.
var ErrInvalid = errors.New("invalid event")

// supported lists the schema versions each consumer understands. A message
// with any other version is dead-lettered with the reason, not guessed at.
var supported = map[Type][]int{
	OrderCreated:           {1},
	OrderConfirmed:         {1},
	OrderCancelled:         {1},
	InventoryReserved:      {1},
	InventoryRejected:      {1},
	PaymentChargeRequested: {1},
	PaymentSucceeded:       {1},
	PaymentFailed:          {1},
	PaymentRefunded:        {1},

	InventoryReservationExpired: {1},
	InventoryCommitFailed:       {1},
	PaymentRefundRequested:      {1},
}

// Strategy is how a consumer must treat an event that arrives out of order
// (the chapter: dedupe does not solve ordering).
type Strategy string

const (
	// Snapshot: the event carries the full state; apply it only if its
	// aggregate_version is newer than the one applied, ignore older ones.
	Snapshot Strategy = "snapshot"
	// Delta: the event carries a change relative to the previous version;
	// never skip a missing version: park it (with a deadline) until the gap
	// fills, and alert with a recovery record when it does not.
	Delta Strategy = "delta"
	// StateTransition: the event moves an aggregate between states; apply
	// it with a conditional update on the legal prior states, so a late
	// event can never move a finished aggregate back.
	StateTransition Strategy = "state-transition"
)

// StrategyOf returns the declared strategy of t (StateTransition when none
// is declared).
func StrategyOf(t Type) Strategy {
	if s, ok := Strategies[t]; ok {
		return s
	}
	return StateTransition
}

// Register declares an event type with its supported schema versions and
// its ordering strategy. The saga's own types are declared above; tests and
// extensions register theirs at init.
func Register(t Type, versions []int, s Strategy) {
	supported[t] = versions
	Strategies[t] = s
}

// Strategies declares the ordering strategy of every event type. Every
// event of the saga moves an aggregate between states; none is a delta or a
// snapshot today. Both are implemented in pkg/ordering and tested with
// types the tests register.
var Strategies = map[Type]Strategy{
	OrderCreated:                StateTransition,
	OrderConfirmed:              StateTransition,
	OrderCancelled:              StateTransition,
	InventoryReserved:           StateTransition,
	InventoryRejected:           StateTransition,
	InventoryReservationExpired: StateTransition,
	InventoryCommitFailed:       StateTransition,
	PaymentChargeRequested:      StateTransition,
	PaymentSucceeded:            StateTransition,
	PaymentFailed:               StateTransition,
	PaymentRefunded:             StateTransition,
	PaymentRefundRequested:      StateTransition,
}

// CurrentSchemaVersion is the version producers write.
const CurrentSchemaVersion = 1

// CheckVersion reports whether a consumer can read this type at this version.
func CheckVersion(t Type, version int) error {
	vs, ok := supported[t]
	if !ok {
		return fmt.Errorf("%w: unknown event type %q", ErrInvalid, t)
	}
	for _, v := range vs {
		if v == version {
			return nil
		}
	}
	return fmt.Errorf("%w: %s schema_version %d not supported (supported: %v)", ErrInvalid, t, version, vs)
}

// Decode unmarshals a payload and validates it. Any failure wraps ErrInvalid.
func Decode[T interface{ Validate() error }](raw []byte) (T, error) {
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, fmt.Errorf("%w: payload: %v", ErrInvalid, err)
	}
	if err := v.Validate(); err != nil {
		return v, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return v, nil
}
