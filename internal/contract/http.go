package contract

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/go-chi/chi/v5"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Checker holds every request a service answers, and every answer, to
// docs/openapi.yaml. Put its Middleware around a service's whole handler
// (outside the guard, so the guard's answers are checked too); it writes
// nothing of its own and changes no answer: it reads the request's body
// as the service does and copies the answer as it is written.
//
// The rules:
//   - an answer to a path the document lists for this service must be one
//     its operation lists: that status, its headers, its body's schema;
//   - a request answered 2xx or 3xx must validate against its operation
//     (parameters, headers, body): an endpoint, a parameter or a field the
//     service accepts without the document saying so fails; a request
//     answered 4xx may be the wrong request on purpose (the hostile suite,
//     a test of a refusal), its answer is what is checked;
//   - a path the document does not list for this service may only be
//     answered with a problem document (404, 405, or the guard's 400, 401
//     and 403): answered otherwise, it is an undocumented endpoint.
//
// Violations are collected; the owner (sagatest) fails the test with them.
type Checker struct {
	doc    *openapi3.T
	router routers.Router
	bodies *bodies

	mu         sync.Mutex
	violations []string
	checked    int
}

// NewChecker returns a Checker over docs/openapi.yaml.
func NewChecker() (*Checker, error) {
	doc, rt, err := OpenAPI()
	if err != nil {
		return nil, err
	}
	p := doc.Components.Schemas["Problem"]
	if p == nil || p.Value == nil {
		return nil, errors.New("docs/openapi.yaml has no Problem schema")
	}
	b, err := sharedBodies()
	if err != nil {
		return nil, err
	}
	return &Checker{doc: doc, router: rt, bodies: b}, nil
}

// Violations returns what did not match the document so far.
func (c *Checker) Violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.violations)
}

// Checked is how many exchanges were checked.
func (c *Checker) Checked() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checked
}

func (c *Checker) violation(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.violations) < 100 {
		c.violations = append(c.violations, fmt.Sprintf(format, args...))
	}
}

// maxChecked bounds what is kept of a body to check; a longer one (a
// hostile request, a big list) is passed on whole, its check skipped.
const maxChecked = 1 << 20

// Middleware checks the exchanges of one service ("order", "inventory",
// "payment", "psp": the x-services of the document's operations).
func (c *Checker) Middleware(service string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reqBody, whole := c.peekBody(r)
			rec := &recorder{ResponseWriter: w, status: 0}
			next.ServeHTTP(rec, r)
			if rec.hijacked {
				return // no answer was written through us (the PSP drops connections on purpose)
			}
			if rec.status == 0 {
				rec.status = http.StatusOK
			}
			c.check(service, r, reqBody, whole, rec)
		})
	}
}

// peekBody reads up to maxChecked bytes of the request body and puts them
// back in front of the rest, so the handler reads the same bytes.
func (c *Checker) peekBody(r *http.Request) ([]byte, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, maxChecked+1))
	rest := r.Body
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(buf), rest), rest}
	return buf, err == nil && len(buf) <= maxChecked
}

func (c *Checker) check(service string, r *http.Request, reqBody []byte, reqWhole bool, rec *recorder) {
	c.mu.Lock()
	c.checked++
	c.mu.Unlock()
	what := fmt.Sprintf("%s %s %s -> %d", service, r.Method, r.URL.RequestURI(), rec.status)
	req := r.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(reqBody))
	route, params, err := c.router.FindRoute(req)
	if err == nil && !served(route.Operation, service) {
		err = routers.ErrPathNotFound
	}
	if err != nil {
		// Not an endpoint of this service: only a problem document may
		// answer it.
		if !slices.Contains([]int{400, 401, 403, 404, 405}, rec.status) {
			c.violation("%s: not an endpoint of %s in docs/openapi.yaml, yet answered %d", what, service, rec.status)
			return
		}
		if r.Method != http.MethodHead {
			c.checkProblem(what, rec)
		}
		return
	}
	// Parameters, headers and statuses are openapi3filter's to check;
	// bodies are c.bodies' (bodies.go says why).
	opts := &openapi3filter.Options{
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
		IncludeResponseStatus: true,
		MultiError:            true,
		ExcludeRequestBody:    true,
		ExcludeResponseBody:   true,
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	if rec.status < 400 && reqWhole {
		err := openapi3filter.ValidateRequest(context.Background(), in)
		if err == nil {
			err = c.bodies.request(route, r, reqBody)
		}
		if err != nil {
			c.violation("%s: the request does not match docs/openapi.yaml (%s), yet it was answered %d: %v",
				what, route.Operation.OperationID, rec.status, oneLine(err))
		}
	}
	if rec.truncated || r.Method == http.MethodHead {
		return
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: rec.status, Header: rec.Header(), Options: opts}
	err = openapi3filter.ValidateResponse(context.Background(), out)
	if err == nil && !unchecked(rec.status) {
		err = c.bodies.response(route, rec.status, rec.Header(), rec.body.Bytes())
	}
	if err != nil {
		c.violation("%s: the answer does not match docs/openapi.yaml (%s): %v\nbody: %s",
			what, route.Operation.OperationID, oneLine(err), clip(rec.body.Bytes()))
	}
}

// checkProblem checks that an answer is a problem document.
func (c *Checker) checkProblem(what string, rec *recorder) {
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		c.violation("%s: answered with %q, not a problem document", what, ct)
		return
	}
	s, err := c.bodies.schema(problemPtr)
	if err == nil {
		var v any
		if v, err = jsonschema.UnmarshalJSON(bytes.NewReader(rec.body.Bytes())); err == nil {
			err = s.Validate(v)
		}
	}
	if err != nil {
		c.violation("%s: not a problem document of docs/openapi.yaml: %v\nbody: %s", what, oneLine(err), clip(rec.body.Bytes()))
	}
}

// problemPtr is the JSON pointer of docs/openapi.yaml's Problem schema.
const problemPtr = "#/components/schemas/Problem"

// unchecked are the statuses openapi3filter never validates an answer of
// (it returns before their headers); their bodies are not checked either.
func unchecked(status int) bool {
	switch status {
	case http.StatusNotModified, http.StatusPermanentRedirect, http.StatusTemporaryRedirect, http.StatusMovedPermanently:
		return true
	}
	return false
}

// served reports whether the operation's x-services names service.
func served(op *openapi3.Operation, service string) bool {
	list, _ := op.Extensions["x-services"].([]any)
	for _, s := range list {
		if s == service {
			return true
		}
	}
	return false
}

func oneLine(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 600 {
		s = s[:600] + "..."
	}
	return s
}

func clip(b []byte) string {
	if len(b) > 400 {
		return string(b[:400]) + "..."
	}
	return string(b)
}

// recorder passes the answer through and keeps a copy of it.
type recorder struct {
	http.ResponseWriter
	status    int
	body      bytes.Buffer
	truncated bool
	hijacked  bool
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.body.Len()+len(b) <= maxChecked {
		r.body.Write(b)
	} else {
		r.truncated = true
	}
	return r.ResponseWriter.Write(b)
}

// Flush and Hijack keep what the writer underneath can do;
// http.ResponseController finds them through Unwrap too.
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := r.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, http.ErrNotSupported
	}
	r.hijacked = true
	return h.Hijack()
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// RouteMismatches lists the routes of a chi router that docs/openapi.yaml
// does not give to service: a route added to a service without the
// document fails its package's test, whether or not a test calls it.
// prefix is where the routes are mounted ("/admin" for admin routes).
// Wildcard routes (mounts, /debug/failpoints/*) are left out.
func RouteMismatches(service, prefix string, routes chi.Routes) ([]string, error) {
	doc, _, err := OpenAPI()
	if err != nil {
		return nil, err
	}
	var out []string
	err = chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		path := strings.TrimSuffix(prefix+route, "/")
		if strings.Contains(path, "*") || path == "" {
			return nil
		}
		item := doc.Paths.Find(path)
		if item == nil {
			out = append(out, fmt.Sprintf("%s %s: not in docs/openapi.yaml", method, path))
			return nil
		}
		op := item.GetOperation(method)
		switch {
		case op == nil:
			out = append(out, fmt.Sprintf("%s %s: docs/openapi.yaml has the path, not the method", method, path))
		case !served(op, service):
			out = append(out, fmt.Sprintf("%s %s: docs/openapi.yaml does not list %s in its x-services", method, path, service))
		}
		return nil
	})
	return out, err
}

// PatternMismatches is RouteMismatches for net/http ServeMux patterns
// ("POST /charges"), mounted under prefix.
func PatternMismatches(service, prefix string, patterns []string) ([]string, error) {
	r := chi.NewRouter()
	nop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for _, p := range patterns {
		method, path, ok := strings.Cut(p, " ")
		if !ok || path == "/" {
			continue // the catch-all of unknown paths
		}
		r.Method(method, path, nop)
	}
	return RouteMismatches(service, prefix, r)
}
