// Package tracing carries a W3C traceparent from the HTTP request that
// started an order, through each outbox row, into every message header and
// back into the context of the consumer that handles it, so one order can be
// followed across the three services' logs by its trace_id. It is not a
// tracing system: no spans are exported; the ids are there to correlate.
package tracing

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"regexp"
)

// Header is the W3C trace context header (and AMQP header) name.
const Header = "traceparent"

// version 00: "00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>".
var valid = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)

// Valid reports whether tp is a well-formed version-00 traceparent with
// non-zero ids.
func Valid(tp string) bool {
	return valid.MatchString(tp) && tp[3:35] != "00000000000000000000000000000000" && tp[36:52] != "0000000000000000"
}

// New starts a new trace.
func New() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "00-" + hex.EncodeToString(b[:16]) + "-" + hex.EncodeToString(b[16:]) + "-01"
}

// Child continues parent's trace with a new span id; an invalid parent
// starts a new trace.
func Child(parent string) string {
	if !Valid(parent) {
		return New()
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return parent[:36] + hex.EncodeToString(b[:]) + parent[52:]
}

// TraceID returns the trace id of tp, or "".
func TraceID(tp string) string {
	if !Valid(tp) {
		return ""
	}
	return tp[3:35]
}

type ctxKey struct{}

// With returns ctx carrying traceparent tp.
func With(ctx context.Context, tp string) context.Context {
	return context.WithValue(ctx, ctxKey{}, tp)
}

// From returns the traceparent carried by ctx, or "".
func From(ctx context.Context) string {
	tp, _ := ctx.Value(ctxKey{}).(string)
	return tp
}

// Middleware continues the caller's trace (its traceparent header) or
// starts one, puts it in the request context and echoes it in the response.
func Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tp := Child(r.Header.Get(Header))
		w.Header().Set(Header, tp)
		next.ServeHTTP(w, r.WithContext(With(r.Context(), tp)))
	})
}

// LogHandler adds trace_id to every record logged with a context that
// carries a traceparent.
type LogHandler struct{ slog.Handler }

// Handle implements slog.Handler.
func (h LogHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := TraceID(From(ctx)); id != "" {
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
