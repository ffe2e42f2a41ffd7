package batch_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/pkg/tracing"
)

// A batch transaction is a span of its own, linked to every message it
// holds, and each message keeps a process span of its own: a child of its
// producer's create span, linked to it and to the batch's span, settled
// by itself (the messaging conventions' batch processing).
func TestABatchIsASpanLinkedToEachOfItsMessages(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	c, _ := inboxtest.Metered(db.DB, "inventory", inboxtest.Increment)
	exp := tracetest.NewInMemoryExporter()
	p, err := tracing.Setup(tracing.WithExporter(context.Background(), exp), tracing.Config{Service: "inventory"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := tracing.WithProvider(context.Background(), p.TracerProvider())
	es := newEvents(3)
	creations := map[string]trace.SpanID{}
	for i := range es {
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{byte(i + 1)}, SpanID: trace.SpanID{byte(i + 1)}, TraceFlags: 1})
		es[i].Traceparent = tracing.Format(sc)
		creations[es[i].EventID] = sc.SpanID()
	}
	wantAcks(t, c.HandleBatch(ctx, deliveries(es...)), 3)

	var batchSpan trace.SpanID
	var processes, settles []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		switch {
		case s.Name == "process inventory.order-events":
			batchSpan = s.SpanContext.SpanID()
			if len(s.Links) != 3 {
				t.Errorf("the batch span links to %d messages, want 3", len(s.Links))
			}
		case s.SpanKind == trace.SpanKindConsumer:
			processes = append(processes, s)
		case s.Name == "ack inventory.order-events":
			settles = append(settles, s)
		}
	}
	if !batchSpan.IsValid() || len(processes) != 3 || len(settles) != 3 {
		t.Fatalf("batch span %v, %d process spans, %d settle spans: want one batch span and three of each", batchSpan, len(processes), len(settles))
	}
	for _, s := range processes {
		id := ""
		for _, kv := range s.Attributes {
			if kv.Key == "messaging.message.id" {
				id = kv.Value.AsString()
			}
		}
		create := creations[id]
		if s.Parent.SpanID() != create || len(s.Links) != 2 || s.Links[0].SpanContext.SpanID() != create ||
			s.Links[1].SpanContext.SpanID() != batchSpan {
			t.Errorf("process span of %s: parent %v, links %v; want its create span %v as parent and link, then the batch %v",
				id, s.Parent.SpanID(), s.Links, create, batchSpan)
		}
	}
}
