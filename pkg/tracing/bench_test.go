package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// BenchmarkOrderSpans makes the messaging spans of one order of the saga
// (six events: a create, a publish, a process with its transaction and a
// settle each, one event read by two consumers), without exporting them
// ("off": the provider of a process without OTEL_EXPORTER_OTLP_ENDPOINT)
// and exported over OTLP/HTTP to a local receiver that reads and drops
// them ("exported": the SDK's batcher, the protobuf encoding and the HTTP
// posts included). docs/performance.md, "Tracing on and off".
func BenchmarkOrderSpans(b *testing.B) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer sink.Close()
	for _, c := range []struct{ name, endpoint string }{{"off", ""}, {"exported", sink.URL}} {
		b.Run(c.name, func(b *testing.B) {
			p, err := Setup(context.Background(), Config{Service: "bench", Endpoint: c.endpoint})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = p.Shutdown(context.Background()) }()
			ctx := WithProvider(context.Background(), p.TracerProvider())
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				orderSpans(ctx, strconv.Itoa(i))
			}
		})
	}
}

// orderSpans makes the spans of one order's messages.
func orderSpans(ctx context.Context, order string) {
	parent := trace.SpanContext{}
	for n, key := range []string{"order.created", "inventory.reserved", "payment.charge-requested",
		"payment.succeeded", "order.confirmed", "inventory.reserved"} {
		m := Message{ID: order + "-" + strconv.Itoa(n), RoutingKey: key, ConversationID: order}
		create := StartCreate(ctx, parent, m)
		create.End()
		creation := Parse(Format(create.SpanContext()))
		StartSend(ctx, "saga.events", creation, m, 1).End()
		pctx, process := StartProcess(ctx, Delivery{Message: m, Queue: "q", Consumer: "c", Attempt: 1, Creation: creation})
		_, tx := Tracer(pctx).Start(pctx, "transaction c")
		tx.End()
		StartSettle(pctx, process.SpanContext(), "q", "ack", "processed").End()
		process.End()
		parent = process.SpanContext()
	}
}
