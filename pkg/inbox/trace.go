package inbox

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/trace"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/tracing"
	"github.com/relmsg/ordersaga/pkg/ordering"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// The consumer's spans (pkg/base/tracing, docs/tracing.md): a process span
// per delivery, and a settle span once it is decided. They watch the
// chapter's path; they decide nothing.

// StartProcess starts the process span of d in this consumer: child of
// and linked to the producer's create span (the message's traceparent),
// plus links (the batch layer's transaction). End it once d is decided.
func (c *Consumer) StartProcess(ctx context.Context, d rabbit.Delivery, links ...trace.Link) (context.Context, trace.Span) {
	key := d.Type // the event type is the routing key it was published with
	if key == "" {
		key = d.RoutingKey
	}
	conv, _ := d.Headers[events.HeaderCorrelationID].(string)
	return tracing.StartProcess(ctx, tracing.Delivery{
		Message: tracing.Message{ID: d.MessageId, RoutingKey: key, ConversationID: conv},
		Queue:   d.Queue, Consumer: c.cfg.Name, DeliveryTag: d.DeliveryTag, Redelivered: d.Redelivered,
		Attempt: d.Attempt, Creation: d.Creation(),
	}, links...)
}

// traceDecision records on d's process span what became of it, and its
// settle span.
func traceDecision(ctx context.Context, d rabbit.Delivery, err error, dec rabbit.Decision) {
	out := outcome(err, dec)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(tracing.Outcome.String(out))
		if err != nil && out != OutcomeDuplicate && out != OutcomeParked {
			tracing.Fail(span, out, err)
		}
	}
	settle(ctx, d, dec, out)
}

// outcome names what became of a delivery, from the error of its
// processing and the decision made of it.
func outcome(err error, dec rabbit.Decision) string {
	switch {
	case dec.Abandoned():
		return OutcomeAbandoned
	case dec != rabbit.Ack():
		return OutcomeRetry
	case err == nil:
		return OutcomeProcessed
	case errors.Is(err, ErrAlreadyProcessed):
		return OutcomeDuplicate
	case errors.Is(err, ordering.ErrParked):
		return OutcomeParked
	case errors.Is(err, ErrPayloadMismatch):
		return OutcomeMismatch
	default:
		return OutcomeDeadLetter
	}
}

// settle records the settle span of a decided delivery: a child of its
// process span (or, without one, of its creation context), named by what
// the consume loop tells the broker right after (ack; retry: a delayed
// copy, then an ack; abandon: the channel closed unacked), with the
// outcome.
func settle(ctx context.Context, d rabbit.Delivery, dec rabbit.Decision, out string) {
	parent := trace.SpanContextFromContext(ctx)
	if !parent.IsValid() {
		parent = d.Creation()
	}
	op := "ack"
	switch out {
	case OutcomeRetry:
		op = "retry"
	case OutcomeAbandoned:
		op = "abandon"
	}
	tracing.StartSettle(ctx, parent, d.Queue, op, out).End()
}

// The outcomes of a delivery, on its process and settle spans.
const (
	OutcomeProcessed  = "processed"
	OutcomeDuplicate  = "duplicate"
	OutcomeParked     = "parked"
	OutcomeMismatch   = "payload_mismatch"
	OutcomeDeadLetter = "dead_letter"
	OutcomeRetry      = "retry"
	OutcomeAbandoned  = "abandoned"
)
