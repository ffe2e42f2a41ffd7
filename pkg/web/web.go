// Package web holds the few HTTP habits every service shares: strict JSON
// decoding, JSON answers and errors, health endpoints and a server with
// timeouts that shuts down gracefully.
package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Error is an HTTP error with a message safe to show to the client.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%d: %s", e.Status, e.Message) }

// Errorf builds an *Error.
func Errorf(status int, format string, args ...any) *Error {
	return &Error{Status: status, Message: fmt.Sprintf(format, args...)}
}

// WriteJSON writes v as JSON with the given status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// WriteError answers {"error": "..."}: the message of an *Error with its
// status, or a generic 500 for anything else (logged once, here, at the edge).
func WriteError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var we *Error
	if errors.As(err, &we) {
		WriteJSON(w, we.Status, map[string]string{"error": we.Message})
		return
	}
	if log != nil {
		log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	WriteJSON(w, http.StatusInternalServerError, map[string]string{"error": "internal error"})
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

// DecodeJSON reads a JSON body into v strictly: the content type must be JSON,
// the body at most maxBytes (413 beyond), no unknown fields, one value only.
func DecodeJSON(w http.ResponseWriter, r *http.Request, maxBytes int64, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return Errorf(http.StatusUnsupportedMediaType, "Content-Type must be application/json")
		}
	} else {
		return Errorf(http.StatusUnsupportedMediaType, "Content-Type must be application/json")
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBytes)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err == nil {
			return Errorf(http.StatusBadRequest, "body must hold a single JSON object")
		}
		return decodeError(err)
	}
	return nil
}

func decodeError(err error) error {
	var maxErr *http.MaxBytesError
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &maxErr):
		return Errorf(http.StatusRequestEntityTooLarge, "body larger than %d bytes", maxErr.Limit)
	case errors.Is(err, io.EOF):
		return Errorf(http.StatusBadRequest, "empty body")
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		return Errorf(http.StatusBadRequest, "malformed JSON")
	case errors.As(err, &typeErr):
		return Errorf(http.StatusBadRequest, "field %q has the wrong type", typeErr.Field)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return Errorf(http.StatusBadRequest, "unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	default:
		return Errorf(http.StatusBadRequest, "invalid JSON: %v", err)
	}
}

// Serve runs an HTTP server on l until ctx ends, then shuts it down, giving
// in-flight requests up to grace to finish. The timeouts bound how long a
// slow or idle client can hold a connection.
func Serve(ctx context.Context, l net.Listener, h http.Handler, grace time.Duration) error {
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
