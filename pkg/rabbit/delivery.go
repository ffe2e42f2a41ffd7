package rabbit

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/relmsg/ordersaga/pkg/base/tracing"
)

// Headers the retry path adds to a message it re-publishes for later.
const (
	HeaderRetryAttempt  = "x-retry-attempt"   // attempts made so far
	HeaderFirstFailedAt = "x-first-failed-at" // unix milliseconds of the first failure
)

// Delivery is one received message plus what the retry policy needs.
type Delivery struct {
	amqp.Delivery
	Queue string
	// Attempt is 1 on the first delivery and grows by one with each delayed
	// retry. Broker redeliveries (a lost channel, a crash) keep the number;
	// the queue's delivery limit bounds those.
	Attempt       int
	FirstFailedAt time.Time // zero until the first failure
}

// KnownSince is when the message is known to exist: its timestamp (the
// outbox's created_at), else its first failure; zero when neither is known.
func (d Delivery) KnownSince() time.Time {
	if !d.Timestamp.IsZero() {
		return d.Timestamp
	}
	return d.FirstFailedAt
}

// FailingFor is the time since the message first failed (0 before that).
func (d Delivery) FailingFor() time.Duration {
	if d.FirstFailedAt.IsZero() {
		return 0
	}
	return time.Since(d.FirstFailedAt)
}

// Creation is the message's creation context, from its traceparent
// header: the span of the producer that wrote it (pkg/base/tracing).
func (d Delivery) Creation() trace.SpanContext {
	tp, _ := d.Headers[tracing.Header].(string)
	return tracing.Parse(tp)
}

// newDelivery reads the retry headers of a received message.
func newDelivery(d amqp.Delivery, queue string) Delivery {
	del := Delivery{Delivery: d, Queue: queue, Attempt: 1}
	if n, ok := IntHeader(d.Headers, HeaderRetryAttempt); ok && n > 0 {
		del.Attempt = int(n) + 1
	}
	if ms, ok := IntHeader(d.Headers, HeaderFirstFailedAt); ok && ms > 0 {
		del.FirstFailedAt = time.UnixMilli(ms).UTC()
	}
	return del
}

// IntHeader reads an integer header, whatever integer type the client
// decoded it as.
func IntHeader(h amqp.Table, key string) (int64, bool) {
	switch v := h[key].(type) {
	case int64:
		return v, true
	case int32:
		return int64(v), true
	case int16:
		return int64(v), true
	case int8:
		return int64(v), true
	case int:
		return int64(v), true
	case uint8:
		return int64(v), true
	case uint16:
		return int64(v), true
	case uint32:
		return int64(v), true
	}
	return 0, false
}

// Decision is what the consume loop does with a delivery once the handler
// is done. Ack only after the handler's transaction committed.
type Decision struct {
	kind   decisionKind
	delay  time.Duration
	Reason string
}

type decisionKind int

const (
	decideAck decisionKind = iota
	decideRetry
	decideAbandon
	decideNothing
)

// Ack: the message is done (processed, duplicate, or stored as a dead letter).
func Ack() Decision { return Decision{kind: decideAck} }

// RetryAfter: a transient failure; redeliver the message after delay through
// a retry queue. The original is acked only once the copy is confirmed.
func RetryAfter(delay time.Duration, reason string) Decision {
	return Decision{kind: decideRetry, delay: delay, Reason: reason}
}

// Delay is the wait of a RetryAfter decision, 0 for the others.
func (d Decision) Delay() time.Duration { return d.delay }

// Abandon: neither ack nor reject; close the channel so the broker redelivers
// every unacked message of it. This is the "ACK lost" window of the chapter,
// reachable only through a failpoint.
func Abandon(reason string) Decision { return Decision{kind: decideAbandon, Reason: reason} }

// Abandoned reports whether d is Abandon.
func (d Decision) Abandoned() bool { return d.kind == decideAbandon }

// AlreadyAcked: the handler acked the delivery itself (only the wrong-way
// "ack before commit" switch does that); do nothing more.
func AlreadyAcked() Decision { return Decision{kind: decideNothing} }
