package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// The messaging spans, by the OpenTelemetry semantic conventions for
// messaging and for RabbitMQ (docs/tracing.md has the table):
//
//	create   PRODUCER  outbox.Add, one per event, child of the request's
//	                   or the message's span; its context is the event's
//	                   creation context, stored in the outbox row
//	send     CLIENT    the dispatcher, one per message published, child of
//	                   and linked to the creation context
//	process  CONSUMER  one per delivery, child of and linked to the
//	                   creation context from the traceparent header
//	process  CONSUMER  a batch transaction (pkg/inbox/batch), linked to
//	                   every message it holds, whose own process spans
//	                   link back to it
//	settle   CLIENT    the ack, nack or delayed retry, child of the process
//	                   span, with what the inbox made of the message
//
// Only attributes needed for sampling are given at start; the others are
// set on recording spans only, so a process that exports nothing pays for
// ids and little else.

// Message is what a messaging span says about one message.
type Message struct {
	ID             string // the event_id, the AMQP message_id
	RoutingKey     string // the event type
	ConversationID string // the order id (the correlation_id header)
}

// Outcome is this repository's attribute for what a consumer made of a
// message (processed, duplicate, retry, dead_letter, ...), on process and
// settle spans: the conventions have no attribute for it.
const Outcome = attribute.Key("ordersaga.outcome")

// Attempt is the delivery attempt of a message (1 the first time) on
// process spans, and the outbox attempt of a publish on send spans.
const Attempt = attribute.Key("ordersaga.attempt")

// Consumer names the consumer whose inbox key a process span used.
const Consumer = semconv.MessagingConsumerGroupNameKey

func (m Message) attrs(kv ...attribute.KeyValue) []attribute.KeyValue {
	kv = append(kv, semconv.MessagingMessageID(m.ID))
	if m.ConversationID != "" {
		kv = append(kv, semconv.MessagingMessageConversationID(m.ConversationID))
	}
	return kv
}

// producerDestination is the conventions' producer destination,
// {exchange}:{routing key}, or the routing key alone before the exchange
// is known (an outbox row names none).
func producerDestination(exchange, key string) string {
	if exchange == "" {
		return key
	}
	return exchange + ":" + key
}

// consumerDestination is {exchange}:{routing key}:{queue}, parts omitted
// when empty.
func consumerDestination(exchange, key, queue string) string {
	d := producerDestination(exchange, key)
	if queue == "" || queue == key {
		return d
	}
	if d == "" {
		return queue
	}
	return d + ":" + queue
}

// StartCreate starts the create span of m, child of parent, or of the span
// in ctx when parent is invalid. End it once the outbox row is written;
// its context is the event's creation context (Format it into the row).
func StartCreate(ctx context.Context, parent trace.SpanContext, m Message) trace.Span {
	tr := Tracer(ctx)
	if parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	}
	_, span := tr.Start(ctx, "create "+m.RoutingKey, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(semconv.MessagingSystemRabbitMQ, semconv.MessagingOperationTypeCreate,
			semconv.MessagingOperationName("create"), semconv.MessagingDestinationName(m.RoutingKey)))
	if span.IsRecording() {
		span.SetAttributes(m.attrs(semconv.MessagingRabbitMQDestinationRoutingKey(m.RoutingKey))...)
	}
	return span
}

// StartSend starts the send span of one message the dispatcher publishes:
// child of its creation context and linked to it (the conventions' link
// from send to create); without one, a trace of its own. attempt is the
// outbox row's attempts.
func StartSend(ctx context.Context, exchange string, creation trace.SpanContext, m Message, attempt int) trace.Span {
	tr := Tracer(ctx)
	dest := producerDestination(exchange, m.RoutingKey)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.MessagingSystemRabbitMQ, semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName("publish"), semconv.MessagingDestinationName(dest))}
	if creation.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, creation)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: creation}))
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	_, span := tr.Start(ctx, "publish "+dest, opts...)
	if span.IsRecording() {
		span.SetAttributes(m.attrs(semconv.MessagingRabbitMQDestinationRoutingKey(m.RoutingKey), Attempt.Int(attempt))...)
	}
	return span
}

// Delivery is what a process span says about one delivery.
type Delivery struct {
	Message
	Exchange    string
	Queue       string
	Consumer    string // the inbox's consumer name
	DeliveryTag uint64
	Redelivered bool
	Attempt     int
	Creation    trace.SpanContext // from the traceparent header
}

// StartProcess starts the process span of one delivery: child of its
// creation context and linked to it (the conventions allow the parent for
// a single message; the link is what holds in a batch too), plus links
// (the batch transaction it ran in). Without a creation context it starts
// a trace of its own.
func StartProcess(ctx context.Context, d Delivery, links ...trace.Link) (context.Context, trace.Span) {
	tr := Tracer(ctx)
	dest := consumerDestination(d.Exchange, d.RoutingKey, d.Queue)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(semconv.MessagingSystemRabbitMQ, semconv.MessagingOperationTypeProcess,
			semconv.MessagingOperationName("process"), semconv.MessagingDestinationName(dest),
			Consumer.String(d.Consumer))}
	if d.Creation.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, d.Creation)
		links = append([]trace.Link{{SpanContext: d.Creation}}, links...)
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	opts = append(opts, trace.WithLinks(links...))
	ctx, span := tr.Start(ctx, "process "+dest, opts...)
	if span.IsRecording() {
		span.SetAttributes(d.attrs(semconv.MessagingRabbitMQDestinationRoutingKey(d.RoutingKey),
			semconv.MessagingRabbitMQMessageDeliveryTag(int(d.DeliveryTag)),
			attribute.Bool("ordersaga.redelivered", d.Redelivered), Attempt.Int(d.Attempt))...)
	}
	return ctx, span
}

// StartBatch starts the span of a batch transaction over several
// deliveries of one queue: the conventions' batch process span, a trace of
// its own linked to each message's creation context (the link carries the
// message id). Each delivery's own process span links to it.
func StartBatch(ctx context.Context, queue, consumer string, ds []Delivery) (context.Context, trace.Span) {
	links := make([]trace.Link, 0, len(ds))
	for _, d := range ds {
		if d.Creation.IsValid() {
			links = append(links, trace.Link{SpanContext: d.Creation,
				Attributes: []attribute.KeyValue{semconv.MessagingMessageID(d.ID)}})
		}
	}
	return Tracer(ctx).Start(ctx, "process "+queue, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(links...),
		trace.WithAttributes(semconv.MessagingSystemRabbitMQ, semconv.MessagingOperationTypeProcess,
			semconv.MessagingOperationName("process"), semconv.MessagingDestinationName(queue),
			Consumer.String(consumer), semconv.MessagingBatchMessageCount(len(ds))))
}

// StartSettle starts the settle span of a delivery: operation is what is
// said to the broker (ack, nack, retry: a delayed copy then an ack,
// abandon: the channel closed unacked), outcome what the consumer made of
// the message. parent is the process span, or without one the creation
// context.
func StartSettle(ctx context.Context, parent trace.SpanContext, queue, operation, outcome string) trace.Span {
	tr := Tracer(ctx)
	if parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	}
	_, span := tr.Start(ctx, operation+" "+queue, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.MessagingSystemRabbitMQ, semconv.MessagingOperationTypeSettle,
			semconv.MessagingOperationName(operation), semconv.MessagingDestinationName(queue)))
	if span.IsRecording() && outcome != "" {
		span.SetAttributes(Outcome.String(outcome))
	}
	return span
}

// Fail marks span as failed with err (error.type is its kind, low in
// cardinality: "returned", "timeout", "retry", ...).
func Fail(span trace.Span, kind string, err error) {
	if !span.IsRecording() {
		return
	}
	span.SetStatus(codes.Error, err.Error())
	span.SetAttributes(semconv.ErrorTypeKey.String(kind))
}
