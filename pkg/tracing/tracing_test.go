package tracing

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestChildKeepsTheTrace(t *testing.T) {
	root := New()
	if !Valid(root) {
		t.Fatalf("New() = %q is not valid", root)
	}
	c := Child(root)
	if !Valid(c) || TraceID(c) != TraceID(root) || c == root {
		t.Fatalf("Child(%q) = %q: want the same trace id and a new span id", root, c)
	}
	for _, bad := range []string{"", "garbage", "00-" + strings.Repeat("0", 32) + "-0123456789abcdef-01", "01-0123456789abcdef0123456789abcdef-0123456789abcdef-01"} {
		if Valid(bad) {
			t.Errorf("Valid(%q) = true", bad)
		}
		if c := Child(bad); !Valid(c) {
			t.Errorf("Child(%q) = %q, want a new valid trace", bad, c)
		}
	}
}

func TestMiddlewareAndLogHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(LogHandler{slog.NewJSONHandler(&buf, nil)})
	parent := New()
	h := Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.InfoContext(r.Context(), "handled")
	}))
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set(Header, parent)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if got := rec.Header().Get(Header); TraceID(got) != TraceID(parent) {
		t.Fatalf("response traceparent %q does not continue %q", got, parent)
	}
	if !strings.Contains(buf.String(), `"trace_id":"`+TraceID(parent)+`"`) {
		t.Fatalf("log line %q has no trace_id", buf.String())
	}
	buf.Reset()
	log.InfoContext(context.Background(), "no trace")
	if strings.Contains(buf.String(), "trace_id") {
		t.Fatalf("trace_id logged without a trace: %q", buf.String())
	}
}
