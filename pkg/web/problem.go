package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
)

// ProblemTypeBase is the start of every problem type URI: the rest is the
// anchor of the type's section in docs/contract.md ("Problems"), so a
// type URI opened in a browser lands on its explanation. The URIs are
// stable: clients may switch on them.
const ProblemTypeBase = "https://github.com/relmsg/ordersaga/blob/main/docs/contract.md#problem-"

// ProblemContentType is the media type of every error answer (RFC 9457).
const ProblemContentType = "application/problem+json"

// Problem types: the slug of each type URI (ProblemTypeBase + slug). Each
// has a fixed title (problemTitles) and a section in docs/contract.md.
const (
	TypeBadRequest       = "bad-request"             // a malformed query or path parameter
	TypeMalformedJSON    = "malformed-json"          // not JSON, empty, trailing data, nested too deep
	TypeAmbiguousJSON    = "ambiguous-json"          // a key twice, or two keys that differ only in case
	TypeUnknownField     = "unknown-field"           // a key the endpoint does not know (case counts)
	TypeWrongType        = "wrong-type"              // a value of the wrong type, or a number out of range
	TypeInvalidText      = "invalid-text"            // invalid UTF-8, or a control character in a string
	TypeNotClean         = "path-not-clean"          // "..", "//" or a control character in the path
	TypeKeyMissing       = "idempotency-key-missing" // a required Idempotency-Key is absent
	TypeKeyInvalid       = "idempotency-key-invalid" // malformed, too long, or more than one key
	TypeKeyInFlight      = "idempotency-key-in-flight"
	TypeKeyReused        = "idempotency-key-reused" // the key came with another request before
	TypeUnauthorized     = "unauthorized"           // no token, or the wrong one
	TypeForbidden        = "forbidden"              // turned off in this mode
	TypeForeignHost      = "foreign-host"           // a Host header that is not this machine's
	TypeCrossOrigin      = "cross-origin"           // a state change sent by another site's page
	TypeNotFound         = "not-found"
	TypeMethodNotAllowed = "method-not-allowed"
	TypeConflict         = "conflict"
	TypeTooLarge         = "body-too-large"
	TypeUnsupportedMedia = "unsupported-media-type"
	TypeUnprocessable    = "unprocessable" // well-formed, but a business rule says no
	TypeTooManyRequests  = "too-many-requests"
	TypeInternal         = "internal-error"
	TypeBadGateway       = "bad-gateway"
	TypeUnavailable      = "unavailable"
	TypeGatewayTimeout   = "gateway-timeout"
)

// problemTitles are the types' titles: the same for every occurrence of a
// type (RFC 9457, section 3.1.3); what differs goes in the detail.
var problemTitles = map[string]string{
	TypeBadRequest:       "Bad request parameter",
	TypeMalformedJSON:    "Malformed JSON body",
	TypeAmbiguousJSON:    "Ambiguous JSON body",
	TypeUnknownField:     "Unknown field",
	TypeWrongType:        "Field of the wrong type",
	TypeInvalidText:      "Invalid text",
	TypeNotClean:         "Path not in its clean form",
	TypeKeyMissing:       "Idempotency-Key missing",
	TypeKeyInvalid:       "Idempotency-Key invalid",
	TypeKeyInFlight:      "Request with this Idempotency-Key in flight",
	TypeKeyReused:        "Idempotency-Key reused with another request",
	TypeUnauthorized:     "Token missing or wrong",
	TypeForbidden:        "Forbidden",
	TypeForeignHost:      "Host not allowed",
	TypeCrossOrigin:      "Cross-origin request refused",
	TypeNotFound:         "Not found",
	TypeMethodNotAllowed: "Method not allowed",
	TypeConflict:         "Conflict with the current state",
	TypeTooLarge:         "Body too large",
	TypeUnsupportedMedia: "Unsupported media type",
	TypeUnprocessable:    "Request refused by a business rule",
	TypeTooManyRequests:  "Too many requests",
	TypeInternal:         "Internal error",
	TypeBadGateway:       "Upstream service did not answer",
	TypeUnavailable:      "Service unavailable",
	TypeGatewayTimeout:   "Upstream service answered too late",
}

// ProblemTypes lists every problem type slug (docs and tests walk it).
func ProblemTypes() []string {
	out := make([]string, 0, len(problemTitles))
	for t := range problemTitles {
		out = append(out, t)
	}
	return out
}

// statusTypes is the type of an Errorf error with no type of its own.
var statusTypes = map[int]string{
	http.StatusBadRequest:            TypeBadRequest,
	http.StatusUnauthorized:          TypeUnauthorized,
	http.StatusForbidden:             TypeForbidden,
	http.StatusNotFound:              TypeNotFound,
	http.StatusMethodNotAllowed:      TypeMethodNotAllowed,
	http.StatusConflict:              TypeConflict,
	http.StatusRequestEntityTooLarge: TypeTooLarge,
	http.StatusUnsupportedMediaType:  TypeUnsupportedMedia,
	http.StatusUnprocessableEntity:   TypeUnprocessable,
	http.StatusTooManyRequests:       TypeTooManyRequests,
	http.StatusInternalServerError:   TypeInternal,
	http.StatusBadGateway:            TypeBadGateway,
	http.StatusServiceUnavailable:    TypeUnavailable,
	http.StatusGatewayTimeout:        TypeGatewayTimeout,
}

// Error is an HTTP error with a message safe to show to the client: the
// problem document's detail. Type is a problem type slug; empty means the
// type that goes with the status.
type Error struct {
	Status  int
	Type    string
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%d: %s", e.Status, e.Message) }

// TypeURI is the error's problem type URI.
func (e *Error) TypeURI() string {
	t := e.typ()
	if t == "" {
		return "about:blank" // RFC 9457: "no semantics beyond the status"
	}
	return ProblemTypeBase + t
}

// typ is the error's type slug: its own, or the one of its status.
func (e *Error) typ() string {
	if e.Type != "" {
		return e.Type
	}
	return statusTypes[e.Status]
}

func (e *Error) title() string {
	if title, ok := problemTitles[e.typ()]; ok {
		return title
	}
	return http.StatusText(e.Status)
}

// Errorf builds an *Error of the status's own type.
func Errorf(status int, format string, args ...any) *Error {
	return &Error{Status: status, Message: fmt.Sprintf(format, args...)}
}

// Problemf builds an *Error of a given problem type (one of the Type...
// constants).
func Problemf(status int, typ, format string, args ...any) *Error {
	return &Error{Status: status, Type: typ, Message: fmt.Sprintf(format, args...)}
}

// Problem is an RFC 9457 problem document. Error repeats Detail: clients
// written before the problem documents read {"error": "..."}, and an
// extension member keeps them working (docs/contract.md, "Problems").
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Instance string `json:"instance,omitempty"`
	Error    string `json:"error"`
}

// ProblemOf is the problem document of e for the request r: its instance
// is the request's path (never its query, which may carry a token).
func ProblemOf(r *http.Request, e *Error) Problem {
	p := Problem{Type: e.TypeURI(), Title: e.title(), Status: e.Status, Detail: e.Message, Error: e.Message}
	if r != nil && r.URL != nil {
		p.Instance = r.URL.EscapedPath()
	}
	return p
}

// WriteProblem answers e as a problem document.
func WriteProblem(w http.ResponseWriter, r *http.Request, e *Error) {
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(ProblemOf(r, e))
}

// WriteError answers err as a problem document: an *Error with its status
// and type, anything else a generic 500 (its cause logged once, here, at
// the edge, never sent).
func WriteError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var we *Error
	if errors.As(err, &we) {
		WriteProblem(w, r, we)
		return
	}
	if log != nil {
		log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	WriteProblem(w, r, Errorf(http.StatusInternalServerError, "internal error"))
}

// NotFound and MethodNotAllowed answer an unknown path and a known path
// with another method, as problem documents (routers' fallbacks).
func NotFound(w http.ResponseWriter, r *http.Request) {
	WriteProblem(w, r, Errorf(http.StatusNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
}

// MethodNotAllowed: see NotFound.
func MethodNotAllowed(w http.ResponseWriter, r *http.Request) {
	WriteProblem(w, r, Errorf(http.StatusMethodNotAllowed, "method not allowed: %s %s", r.Method, r.URL.Path))
}
