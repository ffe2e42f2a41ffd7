// Package tracing is the services' OpenTelemetry tracing: one
// TracerProvider per process (Setup), a server span per HTTP request
// (Middleware), client spans for the calls a service makes (Transport),
// the messaging spans of the outbox and the inbox (messaging.go), and a
// log handler that writes each record's trace_id, so one order can be
// followed across the three services in a trace viewer and in their logs.
//
// The trace of an order crosses the broker by way of the outbox: the
// create span of an event is started when its row is written
// (outbox.Add), and its context is stored in the row (the traceparent
// column), sent as the message's traceparent header, and continued by
// every consumer (docs/tracing.md).
//
// Nothing is exported unless OTEL_EXPORTER_OTLP_ENDPOINT is set: then
// every span goes to that OTLP/HTTP endpoint (a Jaeger, a collector).
// Without it the provider samples nothing: spans are not recorded, yet
// each still gets its ids, so the log lines keep their trace_id and the
// outbox rows their traceparent, at the cost of a few allocations.
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Header is the W3C trace context header (and AMQP header) name.
const Header = "traceparent"

// ScopeName names the instrumentation of this repository's spans.
const ScopeName = "github.com/relmsg/ordersaga/pkg/tracing"

// propagator reads and writes the W3C traceparent, in HTTP headers and in
// the outbox column alike.
var propagator = propagation.TraceContext{}

// Config says what a process's provider is.
type Config struct {
	Service  string // service.name: order, inventory, payment, psp
	Instance string // service.instance.id (INSTANCE_ID)
	// Endpoint is OTEL_EXPORTER_OTLP_ENDPOINT, the base URL of an
	// OTLP/HTTP receiver (http://127.0.0.1:4318); empty: nothing exported.
	Endpoint string
}

// Provider is a process's tracer provider; Shutdown flushes it.
type Provider struct {
	tp        *sdktrace.TracerProvider
	exporting bool
}

// Setup builds the provider of cfg. A test that put an exporter in ctx
// (WithExporter) gets every span of the process there, synchronously.
func Setup(ctx context.Context, cfg Config) (*Provider, error) {
	res := resource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceName(cfg.Service), semconv.ServiceInstanceID(cfg.Instance))
	if exp, ok := ctx.Value(exporterKey{}).(sdktrace.SpanExporter); ok {
		return &Provider{exporting: true, tp: sdktrace.NewTracerProvider(sdktrace.WithResource(res),
			sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSyncer(keepOpen{exp}))}, nil
	}
	if cfg.Endpoint == "" {
		// Ids for the logs and the outbox rows, nothing recorded.
		return &Provider{tp: sdktrace.NewTracerProvider(sdktrace.WithResource(res),
			sdktrace.WithSampler(sdktrace.NeverSample()))}, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(strings.TrimSuffix(cfg.Endpoint, "/")+"/v1/traces"))
	if err != nil {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT=%q: %w", cfg.Endpoint, err)
	}
	// The sampler is the SDK's default, parent-based and always on, unless
	// OTEL_TRACES_SAMPLER says otherwise.
	return &Provider{exporting: true, tp: sdktrace.NewTracerProvider(sdktrace.WithResource(res),
		sdktrace.WithBatcher(exp, sdktrace.WithMaxQueueSize(8192)))}, nil
}

// TracerProvider is the provider, for otelhttp and the context.
func (p *Provider) TracerProvider() trace.TracerProvider { return p.tp }

// Exporting reports whether spans are recorded and sent somewhere.
func (p *Provider) Exporting() bool { return p.exporting }

// Shutdown sends the spans still waiting, within 5 s, and stops.
func (p *Provider) Shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return p.tp.Shutdown(ctx)
}

type exporterKey struct{}

// WithExporter returns ctx with a span exporter that Setup uses in place of
// the environment's: the end-to-end tests run the services in-process
// with the SDK's in-memory exporter (tracetest).
func WithExporter(ctx context.Context, exp sdktrace.SpanExporter) context.Context {
	return context.WithValue(ctx, exporterKey{}, exp)
}

// keepOpen is an exporter that a provider's Shutdown does not shut down:
// a test's exporter outlives the services that stop and start again.
type keepOpen struct{ sdktrace.SpanExporter }

func (keepOpen) Shutdown(context.Context) error { return nil }

type providerKey struct{}

// WithProvider returns ctx carrying the process's provider, for the spans
// of work that no request or message started (the sweeps, the
// dispatcher's sends): process.Start puts it in the context it returns.
func WithProvider(ctx context.Context, tp trace.TracerProvider) context.Context {
	return context.WithValue(ctx, providerKey{}, tp)
}

// Tracer returns the tracer of the span in ctx (the request's or the
// message's), else of the provider in ctx, else the global one (a no-op
// unless a program set one).
func Tracer(ctx context.Context) trace.Tracer {
	// A span made from a bare span context (a parent read from a header)
	// answers with a no-op provider: only the SDK's own spans count.
	if tp, ok := trace.SpanFromContext(ctx).TracerProvider().(*sdktrace.TracerProvider); ok {
		return tp.Tracer(ScopeName)
	}
	if tp, ok := ctx.Value(providerKey{}).(trace.TracerProvider); ok {
		return tp.Tracer(ScopeName)
	}
	return otel.GetTracerProvider().Tracer(ScopeName)
}

// Format returns sc as a W3C traceparent, version 00 ("" for an invalid
// one): the outbox column and the message header. Written out by hand, as
// Parse reads it: the propagator's round trip through a carrier costs a
// dozen allocations, on every event written and every message sent.
func Format(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// Parse reads a version-00 W3C traceparent (what Format and the
// propagator write); a malformed one, or one with a zero id, gives an
// invalid (zero) span context. The context is remote: it came from
// another process, or from a row.
func Parse(tp string) trace.SpanContext {
	if len(tp) != 55 || tp[:3] != "00-" || tp[35] != '-' || tp[52] != '-' {
		return trace.SpanContext{}
	}
	tid, err1 := trace.TraceIDFromHex(tp[3:35])
	sid, err2 := trace.SpanIDFromHex(tp[36:52])
	flags, err3 := strconv.ParseUint(tp[53:], 16, 8)
	if err1 != nil || err2 != nil || err3 != nil || strings.ToLower(tp) != tp {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: trace.TraceFlags(flags), Remote: true})
}

// Valid reports whether tp is a well-formed traceparent with non-zero ids.
func Valid(tp string) bool { return Parse(tp).IsValid() }

// TraceID returns the trace id of the span in ctx, or "".
func TraceID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}

// LogHandler adds trace_id to every record logged with a context that
// carries a span.
type LogHandler struct{ slog.Handler }

// Handle implements slog.Handler.
func (h LogHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := TraceID(ctx); id != "" {
		r.AddAttrs(slog.String("trace_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h LogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return LogHandler{h.Handler.WithAttrs(as)}
}

// WithGroup implements slog.Handler.
func (h LogHandler) WithGroup(name string) slog.Handler { return LogHandler{h.Handler.WithGroup(name)} }
