package process

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/pkg/failpoint"
	"github.com/relmsg/ordersaga/pkg/web"
)

func baseServer(t *testing.T, cfg Config) (*httptest.Server, *failpoint.Registry) {
	t.Helper()
	fps := failpoint.NewRegistry()
	mux := BaseRouter(cfg, time.Now(), func(context.Context) error { return nil }, prometheus.NewRegistry(), fps)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts, fps
}

type answer struct {
	status  int
	problem web.Problem
}

func send(t *testing.T, method, url, host string, header map[string]string, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode}
	if resp.Header.Get("Content-Type") == web.ProblemContentType {
		_ = json.NewDecoder(resp.Body).Decode(&a.problem)
	}
	return a
}

// Every route of every process is behind the guard, and demo mode's
// /debug wants ADMIN_TOKEN when one is set; a refused request arms nothing.
func TestBaseRouterChecksWhoIsAsking(t *testing.T) {
	t.Parallel()
	arm := `{"action":"error","count":1}`
	asJSON := map[string]string{"Content-Type": "application/json"}
	for _, c := range []struct {
		name, token, method, path, host string
		header                          map[string]string
		status                          int
		typ                             string
	}{
		{"health, loopback", "", "GET", "/healthz", "", nil, 200, ""},
		{"health, configured name", "", "GET", "/healthz", "order:8081", nil, 200, ""},
		{"health, foreign host", "", "GET", "/healthz", "evil.example", nil, 403, web.TypeForeignHost},
		{"arm, foreign host", "", "PUT", "/debug/failpoints/order.create.after-order-insert", "evil.example:8081", asJSON, 403, web.TypeForeignHost},
		{"arm, foreign Origin", "", "PUT", "/debug/failpoints/order.create.after-order-insert", "",
			map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example"}, 403, web.TypeCrossOrigin},
		{"release, simple cross-site POST", "", "POST", "/debug/failpoints/order.create.after-order-insert/release", "",
			map[string]string{"Origin": "http://evil.example", "Content-Type": "application/x-www-form-urlencoded"}, 403, web.TypeCrossOrigin},
		{"arm, no token", "s3cret", "PUT", "/debug/failpoints/order.create.after-order-insert", "", asJSON, 401, web.TypeUnauthorized},
		{"arm, wrong token", "s3cret", "PUT", "/debug/failpoints/order.create.after-order-insert", "",
			map[string]string{"Content-Type": "application/json", "Authorization": "Bearer nope"}, 401, web.TypeUnauthorized},
		{"list, no token", "s3cret", "GET", "/debug/failpoints", "", nil, 401, web.TypeUnauthorized},
		{"unknown path", "", "GET", "/nope", "", nil, 404, web.TypeNotFound},
		{"wrong method", "", "POST", "/healthz", "", nil, 405, web.TypeMethodNotAllowed},
		{"path trick", "", "GET", "/healthz/../debug/failpoints", "", nil, 400, web.TypeNotClean},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ts, fps := baseServer(t, Config{DemoMode: true, AdminToken: c.token, AllowedHosts: []string{"order"}})
			a := send(t, c.method, ts.URL+c.path, c.host, c.header, arm)
			if a.status != c.status {
				t.Fatalf("%s %s = %d, want %d", c.method, c.path, a.status, c.status)
			}
			if c.typ != "" && (a.problem.Type != web.ProblemTypeBase+c.typ || a.problem.Detail == "") {
				t.Errorf("problem %+v, want type %s", a.problem, c.typ)
			}
			if armed := fps.Armed(); len(armed) != 0 {
				t.Errorf("a refused request armed %v", armed)
			}
		})
	}
	// The right token arms (the test above can fail: with it, PUT works).
	ts, fps := baseServer(t, Config{DemoMode: true, AdminToken: "s3cret"})
	a := send(t, "PUT", ts.URL+"/debug/failpoints/order.create.after-order-insert", "",
		map[string]string{"Content-Type": "application/json", "Authorization": "Bearer s3cret"}, arm)
	if a.status != http.StatusOK || len(fps.Armed()) != 1 {
		t.Errorf("with the token: %d, armed %v; want 200 and one armed", a.status, fps.Armed())
	}
}
