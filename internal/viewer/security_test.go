package viewer_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/relmsg/ordersaga/internal/viewer"
	"github.com/relmsg/ordersaga/pkg/events"
)

// upstream stands for every service: it records what reaches it.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Method+" "+r.URL.Path)
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{}`)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) requests() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

func (u *upstream) URL(string) string                              { return u.Server.URL }
func (u *upstream) Publish(context.Context, events.Envelope) error { return errors.New("no broker") }
func (u *upstream) PrepareCrash(context.Context, string) error     { return errors.New("no stack") }
func (u *upstream) AwaitRestart(context.Context, string) error     { return errors.New("no stack") }

func viewerOf(t *testing.T, u *upstream, token string) *httptest.Server {
	t.Helper()
	srv := viewer.New(viewer.Config{Target: u, Token: token})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(ts.Close)
	return ts
}

// noRedirects is a client that shows redirects instead of following them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// The token scripts/up.sh prints in the viewer's URL is traded for an
// HttpOnly, SameSite=Strict cookie and dropped from the address; the API
// then works with the cookie, and without it (or with a wrong token) not.
func TestViewerTokenFlow(t *testing.T) {
	t.Parallel()
	u := newUpstream(t)
	ts := viewerOf(t, u, "tok-1")

	for _, c := range []struct {
		name, auth string
	}{{"no token", ""}, {"wrong token", "Bearer tok-2"}, {"a prefix", "Bearer tok"}} {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+"/api/health", nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		p := readProblem(t, resp)
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasSuffix(p.Type, "#problem-unauthorized") {
			t.Errorf("%s: %d %+v, want a 401 problem", c.name, resp.StatusCode, p)
		}
	}
	resp, err := noRedirects.Get(ts.URL + "/?token=nope")
	if err != nil {
		t.Fatal(err)
	}
	if p := readProblem(t, resp); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Errorf("GET /?token=nope = %d %+v cookies %v, want 401 and no cookie", resp.StatusCode, p, resp.Cookies())
	}

	resp, err = noRedirects.Get(ts.URL + "/?token=tok-1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" || len(cookies) != 1 {
		t.Fatalf("GET /?token=tok-1 = %d Location %q cookies %v, want 303 to / with one cookie", resp.StatusCode, resp.Header.Get("Location"), cookies)
	}
	if c := cookies[0]; c.Name != viewer.CookieName || c.Value != "tok-1" || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" {
		t.Errorf("cookie %+v, want HttpOnly, SameSite=Strict, Path=/", c)
	}

	// A browser: follows the redirect, keeps the cookie.
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	resp, err = browser.Get(ts.URL + "/?token=tok-1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.RawQuery != "" {
		t.Errorf("after the trade: %d at %s, want the page without the token in its address", resp.StatusCode, resp.Request.URL)
	}
	resp, err = browser.Get(ts.URL + "/api/lab/experiments")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the API with the cookie: %d, want 200", resp.StatusCode)
	}
}

// Every way a page of another site could drive the lab is refused with a
// problem document, each layer on its own (the right token is sent in
// every case but the token ones), and nothing reaches a service.
func TestViewerRefusesForeignPages(t *testing.T) {
	t.Parallel()
	u := newUpstream(t)
	ts := viewerOf(t, u, "tok-1")
	cookie := "ordersaga_viewer=tok-1"
	arm := `{"action":"crash","count":1}`
	for _, c := range []struct {
		name, method, path, host string
		header                   map[string]string
		body                     string
		status                   int
		typ                      string
	}{
		{"arm a crash, foreign Host", "PUT", "/api/failpoints/order/outbox.dispatch.after-claim", "evil.example",
			map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example", "Cookie": cookie}, arm, 403, "foreign-host"},
		{"wrong way, foreign Host (DNS rebinding)", "PUT", "/api/wrong-way/order", "evil.example:8080",
			map[string]string{"Content-Type": "application/json", "Cookie": cookie}, `{"on":["ack-before-commit"]}`, 403, "foreign-host"},
		{"read the switches, foreign Host", "GET", "/api/switches", "attacker.test:8080",
			map[string]string{"Cookie": cookie}, "", 403, "foreign-host"},
		{"arm a crash, foreign Origin", "PUT", "/api/failpoints/order/outbox.dispatch.after-claim", "",
			map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example", "Cookie": cookie}, arm, 403, "cross-origin"},
		{"release, simple cross-site form POST", "POST", "/api/failpoints/order/outbox.dispatch.after-claim/release", "",
			map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://evil.example", "Cookie": cookie}, "a=1", 403, "cross-origin"},
		{"disarm all, cross-site by Sec-Fetch-Site", "DELETE", "/api/failpoints/order", "",
			map[string]string{"Sec-Fetch-Site": "cross-site", "Cookie": cookie}, "", 403, "cross-origin"},
		{"PSP switch, null Origin (a sandboxed frame)", "PUT", "/api/psp/switches", "",
			map[string]string{"Content-Type": "application/json", "Origin": "null", "Cookie": cookie}, `{"mode":"decline"}`, 403, "cross-origin"},
		{"start a lab run, another port of this machine", "POST", "/api/lab/runs", "",
			map[string]string{"Content-Type": "application/json", "Origin": "http://127.0.0.1:3000", "Cookie": cookie}, `{"experiment":"atomic-commit"}`, 403, "cross-origin"},
		{"arm a crash, no token", "PUT", "/api/failpoints/order/outbox.dispatch.after-claim", "",
			map[string]string{"Content-Type": "application/json"}, arm, 401, "unauthorized"},
		{"arm a crash, wrong token", "PUT", "/api/failpoints/order/outbox.dispatch.after-claim", "",
			map[string]string{"Content-Type": "application/json", "Cookie": "ordersaga_viewer=guess"}, arm, 401, "unauthorized"},
		{"a path trick", "GET", "/api/../api/switches", "",
			map[string]string{"Cookie": cookie}, "", 400, "path-not-clean"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, ts.URL+c.path, strings.NewReader(c.body))
			req.URL.Opaque = c.path // send the path as written
			if c.host != "" {
				req.Host = c.host
			}
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			p := readProblem(t, resp)
			if resp.StatusCode != c.status || !strings.HasSuffix(p.Type, "#problem-"+c.typ) || p.Detail == "" {
				t.Errorf("= %d %+v, want a %d %s problem", resp.StatusCode, p, c.status, c.typ)
			}
		})
	}
	if got := u.requests(); len(got) != 0 {
		t.Fatalf("refused requests reached the services: %v", got)
	}
	// The control: the same page's own request goes through.
	req, _ := http.NewRequest("PUT", ts.URL+"/api/failpoints/order/outbox.dispatch.after-claim", strings.NewReader(arm))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", ts.URL)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Cookie", cookie)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := u.requests(); resp.StatusCode != http.StatusOK || len(got) != 1 || got[0] != "PUT /debug/failpoints/outbox.dispatch.after-claim" {
		t.Errorf("the page's own request: %d, reached %v; want it passed to the service", resp.StatusCode, got)
	}
}

type problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Instance string `json:"instance"`
}

func readProblem(t *testing.T, resp *http.Response) problem {
	t.Helper()
	defer resp.Body.Close()
	var p problem
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
		return p
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Errorf("problem document: %v", err)
	}
	return p
}
