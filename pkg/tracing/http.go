package tracing

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"
)

// quiet are the paths polled by machines (health checks, scrapes): no
// span, they would bury the requests of the saga.
var quiet = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// Middleware starts a server span for each request (otelhttp), continuing
// the caller's traceparent, names it by its route ("POST /orders": chi
// sets the request's Pattern when it routes), and echoes the span's
// traceparent in the response, so a client can look its request up by
// trace id.
func Middleware(tp trace.TracerProvider) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tp := Format(trace.SpanContextFromContext(r.Context())); tp != "" {
				w.Header().Set(Header, tp)
			}
			next.ServeHTTP(w, r)
		})
		return otelhttp.NewHandler(echo, "http.server",
			otelhttp.WithTracerProvider(tp),
			otelhttp.WithPropagators(propagator),
			otelhttp.WithFilter(func(r *http.Request) bool { return !quiet[r.URL.Path] }),
			otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
				if r.Pattern != "" {
					return r.Method + " " + r.Pattern
				}
				return r.Method
			}))
	}
}

// Transport makes each request a client span of the span in its context
// and sends the span's traceparent along (base nil:
// http.DefaultTransport). The payment service's calls to the PSP go
// through it, so the PSP's server span joins the order's trace.
func Transport(base http.RoundTripper, tp trace.TracerProvider) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return otelhttp.NewTransport(base, otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(propagator))
}
