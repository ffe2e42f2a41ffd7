// Package web holds the few HTTP habits every server of the stack shares
// (docs/contract.md, "Conventions"): strict JSON decoding (decode.go),
// errors as RFC 9457 problem documents (problem.go), the Idempotency-Key
// header (idempotency.go), the checks of who is asking (guard.go), health
// endpoints and a server with timeouts that shuts down gracefully.
package web

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// WriteJSON writes v as JSON with the given status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// HandlerFunc is an HTTP handler that returns its error instead of
// answering it: it writes the answer only on success, and returns before
// writing anything when it fails. Handle turns it into an http.HandlerFunc.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// Edge is where one API's errors become answers, once: a handler returns
// an *Error (from Errorf, DecodeJSON, Limit) or a domain error, Map turns
// the domain's sentinels into *Error, and WriteError answers, logging only
// what is left (an unexpected error, a generic 500).
type Edge struct {
	Log *slog.Logger // may be nil: nothing is logged
	// Map is the service's one mapping from its domain errors to *Error.
	// It returns any other error unchanged; nil maps nothing.
	Map func(error) error
}

// Handle adapts h to net/http through the edge.
func (e Edge) Handle(h HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		if e.Map != nil {
			err = e.Map(err)
		}
		WriteError(w, r, e.Log, err)
	}
}

// Handle adapts h to net/http for an API without domain errors of its own:
// Edge{Log: log}.Handle(h).
func Handle(log *slog.Logger, h HandlerFunc) http.HandlerFunc {
	return Edge{Log: log}.Handle(h)
}

// ParseID reads a positive decimal id (an order id, a gap id) from a path or
// query parameter. False for anything else, 0 included: callers answer 404
// for a path and 400 for a query parameter.
func ParseID(s string) (uint64, bool) {
	id, err := strconv.ParseUint(s, 10, 64)
	return id, err == nil && id != 0
}

// Limit reads the limit query parameter: def when it is absent, a 400 *Error
// unless it is a number from 1 to most.
func Limit(r *http.Request, def, most int) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		return 0, Errorf(http.StatusBadRequest, "limit must be between 1 and %d", most)
	}
	return n, nil
}

// QueryList reads a query parameter that lists values separated by commas
// (?event_id=a,b), blanks around the commas ignored; nil when none is given.
func QueryList(r *http.Request, name string) []string {
	var out []string
	for _, v := range strings.Split(r.URL.Query().Get(name), ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

type observerKey struct{}

// WithObserver returns ctx carrying observe, which Serve puts around the
// whole handler of a server it runs with that context. Tests use it to
// watch every exchange of a service they run in-process (internal/sagatest
// holds them to docs/openapi.yaml); an observer must not change an answer.
func WithObserver(ctx context.Context, observe func(http.Handler) http.Handler) context.Context {
	return context.WithValue(ctx, observerKey{}, observe)
}

// Serve runs an HTTP server on l until ctx ends, then shuts it down, giving
// in-flight requests up to grace to finish. The timeouts bound how long a
// slow or idle client can hold a connection.
func Serve(ctx context.Context, l net.Listener, h http.Handler, grace time.Duration) error {
	if observe, ok := ctx.Value(observerKey{}).(func(http.Handler) http.Handler); ok {
		h = observe(h)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("http shutdown: %w", err)
	}
	return nil
}

// Health answers /healthz (the process is up, and since when: a restart
// shows as a new started_at) and /readyz (ready() reports every dependency
// reachable).
func Health(mux interface {
	Get(string, http.HandlerFunc)
}, started time.Time, ready func(context.Context) error) {
	mux.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]any{"status": "ok", "started_at": started})
	})
	mux.Get("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "error": err.Error()})
			return
		}
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
}
