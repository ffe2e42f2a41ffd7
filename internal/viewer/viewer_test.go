package viewer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/sagatest"
	"github.com/relmsg/ordersaga/internal/viewer"
	"github.com/relmsg/ordersaga/pkg/base/events"
)

// startViewer serves a viewer of stack s on a free port and returns its
// URL; call sends its token with every request to it, as the page's
// cookie would (the token itself is tested by TestViewerTokenFlow).
func startViewer(t *testing.T, s *sagatest.Saga, token string) string {
	t.Helper()
	return serve(t, viewer.New(viewer.Config{Target: sagatest.NewTarget(t, s), Token: token, Patience: time.Minute}))
}

// serve serves srv on a free port and returns its URL, with its token
// known to call.
func serve(t *testing.T, srv *viewer.Server) string {
	t.Helper()
	ts := httptest.NewServer(srv.Handler())
	// Cleanups run last in, first out: the server, then any lab run, then
	// the stack (registered before).
	t.Cleanup(srv.Close)
	t.Cleanup(ts.Close)
	viewerTokens.Store(ts.URL, srv.Token())
	t.Cleanup(func() { viewerTokens.Delete(ts.URL) })
	return ts.URL
}

// viewerTokens maps a viewer's URL to its token.
var viewerTokens sync.Map

// tokenOf is the token of the viewer at base.
func tokenOf(base string) string {
	tok, _ := viewerTokens.Load(base)
	return tok.(string)
}

type reply struct {
	status int
	header http.Header
	body   string
}

func call(t *testing.T, method, url string, headers map[string]string, body string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	viewerTokens.Range(func(base, token any) bool {
		if strings.HasPrefix(url, base.(string)+"/") {
			req.Header.Set("Authorization", "Bearer "+token.(string))
		}
		return true
	})
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: string(data)}
}

func compact(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatalf("not JSON: %q", s)
	}
	return b.String()
}

// The viewer's API answers what the services answer to the same request
// (bad input included), and its own errors as JSON.
func TestViewerAPI(t *testing.T) {
	t.Parallel()
	s := sagatest.Start(t)
	base := startViewer(t, s, "")

	t.Run("bad input gets the service's own answer", func(t *testing.T) { badInputGetsTheServicesAnswer(t, s, base) })
	t.Run("a create goes through with its headers", func(t *testing.T) { createGoesThrough(t, base) })
	t.Run("the viewer's own errors are problem documents", func(t *testing.T) { ownErrorsAreProblems(t, base) })
	t.Run("the page and its files are served, from here only", func(t *testing.T) { pageIsServedFromHere(t, base) })
}

// badInputGetsTheServicesAnswer: each bad request the viewer passes on gets
// the answer the service gives it directly.
func badInputGetsTheServicesAnswer(t *testing.T, s *sagatest.Saga, base string) {
	withKey := map[string]string{"Content-Type": "application/json", "Idempotency-Key": "api-1"}
	for _, tc := range []struct {
		name, method, path, svcPath string
		headers                     map[string]string
		body                        string
	}{
		{"no idempotency key", "POST", "/api/orders", "/orders", asJSON, `{"customer_id":"c-1","items":[{"sku":"SKU-1","quantity":1}]}`},
		{"malformed JSON", "POST", "/api/orders", "/orders", withKey, `{"customer_id":`},
		{"unknown SKU", "POST", "/api/orders", "/orders", withKey, `{"customer_id":"c-1","items":[{"sku":"NOPE","quantity":1}]}`},
		{"wrong content type", "POST", "/api/orders", "/orders", map[string]string{"Idempotency-Key": "k", "Content-Type": "text/plain"}, `x`},
		{"unknown order", "GET", "/api/orders/999999", "/orders/999999", nil, ""},
		{"bad status filter", "GET", "/api/orders?status=lost", "/orders?status=lost", nil, ""},
		{"unknown PSP mode", "PUT", "/api/psp/switches", "/psp/switches", asJSON, `{"mode":"explode"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := call(t, tc.method, base+tc.path, tc.headers, tc.body)
			svc := s.Order.URL
			if strings.HasPrefix(tc.svcPath, "/psp") {
				svc = s.PSP.URL // the PSP process
			}
			want := call(t, tc.method, svc+tc.svcPath, tc.headers, tc.body)
			if want.status < 400 {
				t.Fatalf("the service accepted the bad request: %d %s", want.status, want.body)
			}
			if got.status != want.status || compact(t, got.body) != compact(t, want.body) {
				t.Errorf("viewer answered %d %s; the service %d %s", got.status, got.body, want.status, want.body)
			}
		})
	}
	// An unknown failpoint and a wrong-way switch, on the service the
	// path names.
	got := call(t, "PUT", base+"/api/failpoints/inventory/no.such.point", asJSON, `{"action":"error"}`)
	want := call(t, "PUT", s.Inventory.URL+"/debug/failpoints/no.such.point", asJSON, `{"action":"error"}`)
	if got.status != http.StatusNotFound || got.body != want.body {
		t.Errorf("unknown failpoint: viewer %d %s; service %d %s", got.status, got.body, want.status, want.body)
	}
	got = call(t, "PUT", base+"/api/wrong-way/order", asJSON, `{"on":["nonsense"]}`)
	if got.status != http.StatusBadRequest || !strings.Contains(got.body, "unknown wrong-way switch") {
		t.Errorf("unknown wrong-way switch: %d %s", got.status, got.body)
	}
}

// createGoesThrough: a create through the viewer keeps its idempotency
// headers, and its story shows the whole saga.
func createGoesThrough(t *testing.T, base string) {
	body := `{"customer_id":"c-api","items":[{"sku":"SKU-2","quantity":1}]}`
	first := call(t, "POST", base+"/api/orders", map[string]string{"Content-Type": "application/json", "Idempotency-Key": "api-create"}, body)
	again := call(t, "POST", base+"/api/orders", map[string]string{"Content-Type": "application/json", "Idempotency-Key": "api-create"}, body)
	if first.status != http.StatusAccepted || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("create: %d replayed=%q %s", first.status, first.header.Get("Idempotent-Replayed"), first.body)
	}
	if again.status != http.StatusAccepted || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("same key again: %d replayed=%q", again.status, again.header.Get("Idempotent-Replayed"))
	}
	var o struct {
		OrderID string `json:"order_id"`
	}
	_ = jsonUnmarshal(first.body, &o)
	sagatest.Eventually(t, 30*time.Second, "the story of order "+o.OrderID+" to show it confirmed and committed", func() bool {
		var st struct {
			Order struct {
				Status string `json:"status"`
			} `json:"order"`
			Timeline struct {
				Entries []struct {
					Kind string `json:"kind"`
				} `json:"entries"`
			} `json:"timeline"`
			Reservation struct {
				Status string `json:"status"`
			} `json:"reservation"`
			Payment struct {
				IdempotencyKey string `json:"idempotency_key"`
			} `json:"payment"`
			PSPCharges []struct {
				IdempotencyKey string `json:"idempotency_key"`
			} `json:"psp_charges"`
			Outbox map[string][]struct {
				Status string `json:"status"`
			} `json:"outbox"`
			Warnings []string `json:"warnings"`
		}
		r := call(t, "GET", base+"/api/orders/"+o.OrderID+"/story", nil, "")
		if r.status != http.StatusOK || jsonUnmarshal(r.body, &st) != nil {
			t.Fatalf("story: %d %s", r.status, r.body)
		}
		if len(st.Warnings) > 0 {
			t.Fatalf("story warnings: %v", st.Warnings)
		}
		rows := len(st.Outbox["order"]) + len(st.Outbox["inventory"]) + len(st.Outbox["payment"])
		return st.Order.Status == "confirmed" && st.Reservation.Status == "committed" && len(st.Timeline.Entries) > 0 &&
			st.Payment.IdempotencyKey == "charge-"+o.OrderID && len(st.PSPCharges) == 1 &&
			st.PSPCharges[0].IdempotencyKey == "charge-"+o.OrderID && rows == 5
	})
}

// ownErrorsAreProblems: what the viewer refuses itself, it answers as a
// problem document.
func ownErrorsAreProblems(t *testing.T, base string) {
	for _, tc := range []struct {
		method, path, body string
		status             int
		says               string
	}{
		{"GET", "/api/nope", "", http.StatusNotFound, "no route"},
		{"DELETE", "/api/orders", "", http.StatusMethodNotAllowed, "not allowed"},
		{"PUT", "/api/wrong-way/billing", `{"on":[]}`, http.StatusNotFound, "no service"},
		{"GET", "/api/orders/abc/story", "", http.StatusNotFound, "order not found"},
		{"GET", "/api/orders/999999/story", "", http.StatusNotFound, "order not found"},
		{"POST", "/api/lab/runs", `{"experiment":"nope"}`, http.StatusUnprocessableEntity, "no experiment"},
		{"POST", "/api/lab/runs", `{"experiment":"send-recovery","wrong_way":true}`, http.StatusUnprocessableEntity, "no wrong-way switch"},
		{"POST", "/api/lab/runs", `{"experiment":"send-recovery","colour":1}`, http.StatusBadRequest, "unknown field"},
		{"GET", "/api/lab/runs/77", "", http.StatusNotFound, "no lab run"},
		{"GET", "/static/missing.js", "", http.StatusNotFound, "no route"},
	} {
		r := call(t, tc.method, base+tc.path, asJSON, tc.body)
		var e struct {
			Type   string `json:"type"`
			Detail string `json:"detail"`
		}
		if r.status != tc.status || jsonUnmarshal(r.body, &e) != nil || !strings.Contains(e.Detail, tc.says) || e.Type == "" ||
			r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s = %d %s; want a %d problem document saying %q", tc.method, tc.path, r.status, r.body, tc.status, tc.says)
		}
	}
}

// pageIsServedFromHere: the page and its static files, none of which names
// an outside address.
func pageIsServedFromHere(t *testing.T, base string) {
	r := call(t, "GET", base+"/", nil, "")
	if r.status != http.StatusOK || !strings.Contains(r.body, `<script src="/static/app.js"`) {
		t.Fatalf("GET / = %d %.200s", r.status, r.body)
	}
	if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("Content-Security-Policy = %q, want the page kept to its own files", csp)
	}
	for _, f := range []string{"app.js", "i18n.js", "diagram.js", "asof.js", "stepper.js", "lab.js", "app.css"} {
		r := call(t, "GET", base+"/static/"+f, nil, "")
		// The SVG namespace is a name, not an address anything fetches.
		body := strings.ReplaceAll(r.body, "http://www.w3.org/2000/svg", "")
		if r.status != http.StatusOK || strings.Contains(body, "http://") || strings.Contains(body, "https://") || strings.Contains(body, "//cdn") {
			t.Errorf("/static/%s: %d, or it names an outside address", f, r.status)
		}
	}
}

// asJSON is the header of a request with a JSON body.
var asJSON = map[string]string{"Content-Type": "application/json"}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// fixedTarget is a lab.Target with no stack behind it: enough for what
// does not reach a service.
type fixedTarget struct{}

func (fixedTarget) URL(string) string                              { return "http://127.0.0.1:9" }
func (fixedTarget) Publish(context.Context, events.Envelope) error { return errors.New("no broker") }
func (fixedTarget) PrepareCrash(context.Context, string) error     { return errors.New("no stack") }
func (fixedTarget) AwaitRestart(context.Context, string) error     { return errors.New("no stack") }
