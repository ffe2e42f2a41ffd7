package tracing

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// recorder returns a provider of the SDK whose spans go to an in-memory
// exporter, as the end-to-end tests' (WithExporter).
func recorder(t *testing.T) (*Provider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	p, err := Setup(WithExporter(context.Background(), exp), Config{Service: "test", Instance: "t-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p, exp
}

func TestFormatAndParse(t *testing.T) {
	const tp = "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"
	sc := Parse(tp)
	if !sc.IsValid() || !sc.IsSampled() || Format(sc) != tp {
		t.Fatalf("Parse(%q) = %v, formatted %q", tp, sc, Format(sc))
	}
	// What the W3C propagator writes, Parse reads alike.
	c := propagation.MapCarrier{}
	propagator.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
	if c[Header] != tp || !Parse(c[Header]).Equal(trace.SpanContextFromContext(propagator.Extract(context.Background(), c))) {
		t.Fatalf("propagator wrote %q; Parse and Extract differ", c[Header])
	}
	for _, bad := range []string{"", "garbage", "00-" + strings.Repeat("0", 32) + "-0123456789abcdef-01",
		"00-0123456789abcdef0123456789abcdef-" + strings.Repeat("0", 16) + "-01",
		"01-0123456789abcdef0123456789abcdef-0123456789abcdef-01", "00-0123456789ABCDEF0123456789abcdef-0123456789abcdef-01",
		"00-0123456789abcdef0123456789abcdef-0123456789abcdef-1", "00-0123456789abcdef0123456789abcdef-0123456789abcdef-zz"} {
		if Valid(bad) {
			t.Errorf("Valid(%q) = true", bad)
		}
		if got := Format(Parse(bad)); got != "" {
			t.Errorf("Format(Parse(%q)) = %q, want \"\"", bad, got)
		}
	}
}

// Without an endpoint nothing is recorded, yet every span has its ids:
// log lines keep their trace_id and rows their traceparent.
func TestWithoutAnEndpointNothingIsRecordedButIdsAreMade(t *testing.T) {
	p, err := Setup(context.Background(), Config{Service: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Exporting() {
		t.Fatal("Exporting() = true without an endpoint")
	}
	ctx := WithProvider(context.Background(), p.TracerProvider())
	span := StartCreate(ctx, trace.SpanContext{}, Message{ID: "e-1", RoutingKey: "order.created", ConversationID: "7"})
	defer span.End()
	if span.IsRecording() {
		t.Error("the create span is recording")
	}
	if tp := Format(span.SpanContext()); !Valid(tp) || Parse(tp).IsSampled() {
		t.Errorf("create span's traceparent %q: want valid and not sampled", tp)
	}
}

func TestMiddlewareContinuesTheCallerAndLogsTheTraceID(t *testing.T) {
	p, exp := recorder(t)
	var buf bytes.Buffer
	log := slog.New(LogHandler{slog.NewJSONHandler(&buf, nil)})
	mux := chi.NewRouter()
	mux.Use(Middleware(p.TracerProvider()))
	mux.Get("/orders/{id}", func(w http.ResponseWriter, r *http.Request) { log.InfoContext(r.Context(), "handled") })
	mux.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {})

	const parent = "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"
	req := httptest.NewRequest("GET", "/orders/42", nil)
	req.Header.Set(Header, parent)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	got := Parse(rec.Header().Get(Header))
	if got.TraceID() != Parse(parent).TraceID() || got.SpanID() == Parse(parent).SpanID() {
		t.Fatalf("response traceparent %q does not continue %q with a span of its own", rec.Header().Get(Header), parent)
	}
	if !strings.Contains(buf.String(), `"trace_id":"0123456789abcdef0123456789abcdef"`) {
		t.Fatalf("log line %q has no trace_id", buf.String())
	}
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/healthz", nil))

	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1 (none for /healthz): %v", len(spans), spans)
	}
	s := spans[0]
	if s.Name != "GET /orders/{id}" || s.SpanKind != trace.SpanKindServer || s.Parent.SpanID() != Parse(parent).SpanID() {
		t.Errorf("span %q kind %v parent %v: want GET /orders/{id}, server, the caller's", s.Name, s.SpanKind, s.Parent.SpanID())
	}
	buf.Reset()
	log.InfoContext(context.Background(), "no trace")
	if strings.Contains(buf.String(), "trace_id") {
		t.Fatalf("trace_id logged without a trace: %q", buf.String())
	}
}

// A message's spans, producer to consumer: the send and the process span
// are children of the create span and link to it; a batch's transaction
// links to each message, and each message's process span to it.
func TestMessagingSpansLinkToTheCreationContext(t *testing.T) {
	p, exp := recorder(t)
	ctx := WithProvider(context.Background(), p.TracerProvider())
	m := Message{ID: "e-1", RoutingKey: "order.created", ConversationID: "7"}
	create := StartCreate(ctx, trace.SpanContext{}, m)
	create.End()
	creation := Parse(Format(create.SpanContext())) // as read back from the row
	StartSend(ctx, "saga.events", creation, m, 1).End()
	d := Delivery{Message: m, Queue: "inventory.order-events", Consumer: "inventory", Attempt: 1, Creation: creation}
	_, batch := StartBatch(ctx, d.Queue, d.Consumer, []Delivery{d, d})
	_, process := StartProcess(ctx, d, trace.Link{SpanContext: batch.SpanContext()})
	StartSettle(ctx, process.SpanContext(), d.Queue, "ack", "processed").End()
	process.End()
	batch.End()

	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range exp.GetSpans().Snapshots() {
		byName[s.Name()] = s
	}
	links := func(s sdktrace.ReadOnlySpan) (ids []trace.SpanID) {
		for _, l := range s.Links() {
			ids = append(ids, l.SpanContext.SpanID())
		}
		return ids
	}
	for _, c := range []struct {
		name   string
		parent trace.SpanID
		links  []trace.SpanID
		kind   trace.SpanKind
	}{
		{"create order.created", trace.SpanID{}, nil, trace.SpanKindProducer},
		{"publish saga.events:order.created", creation.SpanID(), []trace.SpanID{creation.SpanID()}, trace.SpanKindClient},
		{"process order.created:inventory.order-events", creation.SpanID(), []trace.SpanID{creation.SpanID(), batch.SpanContext().SpanID()}, trace.SpanKindConsumer},
		{"process inventory.order-events", trace.SpanID{}, []trace.SpanID{creation.SpanID(), creation.SpanID()}, trace.SpanKindConsumer},
		{"ack inventory.order-events", process.SpanContext().SpanID(), nil, trace.SpanKindClient},
	} {
		s, ok := byName[c.name]
		if !ok {
			t.Errorf("no span %q among %v", c.name, byName)
			continue
		}
		if s.Parent().SpanID() != c.parent || s.SpanKind() != c.kind || !equalIDs(links(s), c.links) {
			t.Errorf("%s: parent %v kind %v links %v, want %v %v %v", c.name, s.Parent().SpanID(), s.SpanKind(), links(s), c.parent, c.kind, c.links)
		}
	}
	if got := byName["process order.created:inventory.order-events"].SpanContext().TraceID(); got != creation.TraceID() {
		t.Errorf("the process span is in trace %v, want the producer's %v", got, creation.TraceID())
	}
}

func equalIDs(a, b []trace.SpanID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
