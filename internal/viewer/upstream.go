package viewer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/pkg/web"
)

// maxForwardBody bounds what the viewer reads from the page before
// forwarding it. The services set their own, smaller limits and answer 413
// themselves, so the page sees their answer.
const maxForwardBody = 1 << 20

// forwardedHeaders are the request headers a service reads; the rest stay
// with the viewer.
var forwardedHeaders = []string{"Content-Type", "Idempotency-Key"}

// answerHeaders are the answer headers a client of the services reads.
var answerHeaders = []string{"Content-Type", "Idempotent-Replayed", "Location", "Allow"}

// pass forwards the request to one service and copies its answer: status,
// body and the headers a client reads. path may hold chi parameters
// ("/orders/{id}"), filled from the request; the query string goes along.
func (s *Server) pass(service, path string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { s.forward(w, r, service, path) }
}

// passTo is pass for routes that name the service in {service}.
func (s *Server) passTo(path string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		svc := chi.URLParam(r, "service")
		if !knownService(svc) {
			web.WriteError(w, r, nil, web.Errorf(http.StatusNotFound, "no service %q (order, inventory or payment)", svc))
			return
		}
		s.forward(w, r, svc, path)
	}
}

func (s *Server) forward(w http.ResponseWriter, r *http.Request, service, path string) {
	target := s.cfg.Target.URL(service) + fillParams(r, path)
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	var body io.Reader
	if r.Body != nil && r.Method != http.MethodGet {
		data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxForwardBody))
		if err != nil {
			web.WriteError(w, r, nil, web.Errorf(http.StatusRequestEntityTooLarge, "body larger than %d bytes", maxForwardBody))
			return
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, target, body)
	if err != nil {
		web.WriteError(w, r, s.cfg.Log, err)
		return
	}
	// Every value, so a service sees two Idempotency-Key lines as two
	// (and refuses them) rather than the first alone.
	for _, h := range forwardedHeaders {
		for _, v := range r.Header.Values(h) {
			req.Header.Add(h, v)
		}
	}
	s.authorize(req)
	resp, err := s.client.Do(req)
	if err != nil {
		web.WriteError(w, r, nil, unreachable(service, err))
		return
	}
	defer resp.Body.Close()
	for _, h := range answerHeaders {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// fillParams replaces {name} in path with the request's escaped chi
// parameter.
func fillParams(r *http.Request, path string) string {
	for {
		i := strings.Index(path, "{")
		j := strings.Index(path, "}")
		if i < 0 || j < i {
			return path
		}
		path = path[:i] + url.PathEscape(chi.URLParam(r, path[i+1:j])) + path[j+1:]
	}
}

func (s *Server) authorize(req *http.Request) {
	if s.cfg.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+s.cfg.AdminToken)
	}
}

// unreachable is the answer when a service did not answer at all (down,
// restarting after a crash): 502, as a gateway would.
func unreachable(service string, err error) error {
	return web.Errorf(http.StatusBadGateway, "the %s service did not answer: %v", service, err)
}

// answer is what a service said to one GET.
type answer struct {
	Status int
	Body   json.RawMessage
	Err    error // no answer at all
}

// ok reports whether the service answered 200.
func (a answer) ok() bool { return a.Err == nil && a.Status == http.StatusOK }

// problem describes a failed answer in one line, for warnings: a problem
// document's detail (or the "error" of an answer without one).
func (a answer) problem(service, path string) string {
	if a.Err != nil {
		return fmt.Sprintf("%s %s: no answer: %v", service, path, a.Err)
	}
	var e struct {
		Detail string `json:"detail"`
		Error  string `json:"error"`
	}
	_ = json.Unmarshal(a.Body, &e)
	if e.Detail == "" {
		e.Detail = e.Error
	}
	return fmt.Sprintf("%s %s: %d %s", service, path, a.Status, e.Detail)
}

// get asks a service and keeps its answer whatever the status.
func (s *Server) get(ctx context.Context, service, path string) answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.Target.URL(service)+path, nil)
	if err != nil {
		return answer{Err: err}
	}
	s.authorize(req)
	resp, err := s.client.Do(req)
	if err != nil {
		return answer{Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return answer{Status: resp.StatusCode, Err: err}
	}
	if !json.Valid(data) {
		data, _ = json.Marshal(map[string]string{"error": strings.TrimSpace(string(data))})
	}
	return answer{Status: resp.StatusCode, Body: data}
}

// getInto asks a service and decodes a 200 answer into out.
func (s *Server) getInto(ctx context.Context, service, path string, out any) error {
	a := s.get(ctx, service, path)
	if !a.ok() {
		return fmt.Errorf("%s", a.problem(service, path))
	}
	if err := json.Unmarshal(a.Body, out); err != nil {
		return fmt.Errorf("%s %s: decode: %w", service, path, err)
	}
	return nil
}
