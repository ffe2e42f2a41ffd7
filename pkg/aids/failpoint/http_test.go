package failpoint_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
)

// do sends one request to h and returns the status and the body.
func do(t *testing.T, h http.Handler, method, path, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// handlerCases are the requests TestHandler sends, each to a registry of
// its own: a long table of data (what the request does is in its name).
var handlerCases = []struct {
	name       string
	setup      func(r *failpoint.Registry)
	method     string
	path       string
	body       string
	wantStatus int
	wantBody   string // must appear in the body
	wantArmed  []failpoint.Status
}{
	{name: "list empty", method: "GET", path: "/",
		wantStatus: 200, wantBody: `"armed": []`},
	{name: "list shows known points", method: "GET", path: "/",
		wantStatus: 200, wantBody: `"name": "psp.charge.after-charge-before-response"`},
	{name: "list armed", setup: func(r *failpoint.Registry) { r.Error(claim, 2) }, method: "GET", path: "/",
		wantStatus: 200, wantBody: `"remaining": 2`,
		wantArmed: []failpoint.Status{{Name: claim, Action: failpoint.ActionError, Remaining: 2}}},
	{name: "arm error", method: "PUT", path: "/" + effect, body: `{"action":"error","count":1}`,
		wantStatus: 200, wantBody: `"action": "error"`,
		wantArmed: []failpoint.Status{{Name: effect, Action: failpoint.ActionError, Remaining: 1}}},
	{name: "arm pause without count", method: "PUT", path: "/" + claim, body: `{"action":"pause"}`,
		wantStatus: 200, wantBody: `"remaining": -1`,
		wantArmed: []failpoint.Status{{Name: claim, Action: failpoint.ActionPause, Remaining: -1}}},
	{name: "arm crash", method: "PUT", path: "/" + mark, body: `{"action":"crash"}`,
		wantStatus: 200, wantBody: `"action": "crash"`,
		wantArmed: []failpoint.Status{{Name: mark, Action: failpoint.ActionCrash, Remaining: 1}}},
	{name: "arm unknown name", method: "PUT", path: "/inbox.after-clam", body: `{"action":"error"}`,
		wantStatus: 404, wantBody: `unknown failpoint \"inbox.after-clam\" (known: `},
	{name: "arm unknown action", method: "PUT", path: "/" + claim, body: `{"action":"boom"}`,
		wantStatus: 400, wantBody: `unknown action`},
	{name: "arm without action", method: "PUT", path: "/" + claim, body: `{"count":1}`,
		wantStatus: 400, wantBody: `unknown action \"\"`},
	{name: "arm negative count", method: "PUT", path: "/" + claim, body: `{"action":"error","count":-1}`,
		wantStatus: 400, wantBody: `must not be negative`},
	{name: "arm crash twice", method: "PUT", path: "/" + mark, body: `{"action":"crash","count":2}`,
		wantStatus: 400, wantBody: `crash fires once`},
	{name: "arm malformed JSON", method: "PUT", path: "/" + claim, body: `{"action":`,
		wantStatus: 400, wantBody: `malformed JSON`},
	{name: "arm unknown field", method: "PUT", path: "/" + claim, body: `{"action":"error","times":1}`,
		wantStatus: 400, wantBody: `unknown field`},
	{name: "arm without body", method: "PUT", path: "/" + claim,
		wantStatus: 415, wantBody: `Content-Type must be application/json`},
	{name: "release not armed", method: "POST", path: "/" + claim + "/release",
		wantStatus: 404, wantBody: `is not armed`},
	{name: "release an error point", setup: func(r *failpoint.Registry) { r.Error(claim, 0) },
		method: "POST", path: "/" + claim + "/release",
		wantStatus: 409, wantBody: `armed with error, not pause`,
		wantArmed: []failpoint.Status{{Name: claim, Action: failpoint.ActionError, Remaining: -1}}},
	{name: "release unknown name", method: "POST", path: "/nope.x/release",
		wantStatus: 404, wantBody: `unknown failpoint`},
	{name: "release a pause", setup: func(r *failpoint.Registry) { r.Pause(claim, 0) },
		method: "POST", path: "/" + claim + "/release",
		wantStatus: 200, wantBody: `"remaining": 0`,
		wantArmed: []failpoint.Status{{Name: claim, Action: failpoint.ActionPause, Remaining: 0}}},
	{name: "disarm one", setup: func(r *failpoint.Registry) { r.Error(claim, 0); r.Error(mark, 0) },
		method: "DELETE", path: "/" + claim, wantStatus: 204,
		wantArmed: []failpoint.Status{{Name: mark, Action: failpoint.ActionError, Remaining: -1}}},
	{name: "disarm one not armed", method: "DELETE", path: "/" + claim, wantStatus: 204},
	{name: "disarm unknown name", method: "DELETE", path: "/nope.x",
		wantStatus: 404, wantBody: `unknown failpoint`},
	{name: "disarm all", setup: func(r *failpoint.Registry) { r.Error(claim, 0); r.Pause(mark, 0) },
		method: "DELETE", path: "/", wantStatus: 204},
	{name: "wrong method on a point", method: "POST", path: "/" + claim,
		wantStatus: 405, wantBody: `allowed: PUT, DELETE`},
	{name: "wrong method on the root", method: "PUT", path: "/",
		wantStatus: 405, wantBody: `allowed: GET, DELETE`},
	{name: "no such route", method: "GET", path: "/a/b/c",
		wantStatus: 404, wantBody: `no route GET /a/b/c`},
}

func TestHandler(t *testing.T) {
	for _, tt := range handlerCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := failpoint.NewRegistry()
			t.Cleanup(r.DisableAll)
			if tt.setup != nil {
				tt.setup(r)
			}
			status, body := do(t, r.Handler(), tt.method, tt.path, tt.body)
			if status != tt.wantStatus {
				t.Errorf("%s %s: got status %d, want %d (body %s)", tt.method, tt.path, status, tt.wantStatus, body)
			}
			if !strings.Contains(body, tt.wantBody) {
				t.Errorf("%s %s: got body %s, want it to contain %s", tt.method, tt.path, body, tt.wantBody)
			}
			if status >= 400 {
				var e struct{ Error string }
				if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" {
					t.Errorf("error body: got %s, want {\"error\":\"...\"}", body)
				}
			}
			wantArmed(t, r, tt.wantArmed)
		})
	}
}

// wantArmed checks the points armed in r against want, in order.
func wantArmed(t *testing.T, r *failpoint.Registry, want []failpoint.Status) {
	t.Helper()
	got := r.Armed()
	if len(got) != len(want) {
		t.Fatalf("armed: got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("armed[%d]: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// The demo walk-through: arm a pause over HTTP, see a goroutine stuck in the
// window, release it over HTTP, disarm. Mounted under a prefix, as services do.
func TestHandlerPauseReleaseFlow(t *testing.T) {
	r := failpoint.NewRegistry()
	t.Cleanup(r.DisableAll)
	mux := http.NewServeMux()
	h := http.StripPrefix("/debug/failpoints", r.Handler())
	mux.Handle("/debug/failpoints", h) // the bare mount point reaches Handler as ""
	mux.Handle("/debug/failpoints/", h)
	ctx := failpoint.WithRegistry(context.Background(), r)

	if status, body := do(t, mux, "PUT", "/debug/failpoints/"+claim, `{"action":"pause","count":1}`); status != 200 {
		t.Fatalf("arm: got %d %s, want 200", status, body)
	}
	errc := make(chan error, 1)
	go func() { errc <- failpoint.Inject(ctx, claim) }()
	waitPaused(t, r, claim, 1)

	status, body := do(t, mux, "GET", "/debug/failpoints/", "")
	var list struct {
		Armed []failpoint.Status
		Known []failpoint.Point
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil || status != 200 {
		t.Fatalf("list: got %d %s, want 200 and JSON", status, body)
	}
	want := failpoint.Status{Name: claim, Action: failpoint.ActionPause, Remaining: 0, Hits: 1, Paused: 1}
	if len(list.Armed) != 1 || list.Armed[0] != want {
		t.Fatalf("armed: got %+v, want [%+v]", list.Armed, want)
	}
	if len(list.Known) < len(failpoint.Points) {
		t.Errorf("known: got %d points, want %d", len(list.Known), len(failpoint.Points))
	}

	if status, body := do(t, mux, "POST", "/debug/failpoints/"+claim+"/release", ""); status != 200 {
		t.Fatalf("release: got %d %s, want 200", status, body)
	}
	if err := <-errc; err != nil {
		t.Fatalf("released Inject: got %v, want nil", err)
	}
	if status, body := do(t, mux, "DELETE", "/debug/failpoints", ""); status != 204 {
		t.Fatalf("disarm all at the bare mount point: got %d %s, want 204", status, body)
	}
	if err := failpoint.Inject(ctx, claim); err != nil {
		t.Fatalf("Inject after disarm: got %v, want nil", err)
	}
	if got := r.Armed(); len(got) != 0 {
		t.Fatalf("armed after DELETE: got %+v, want none", got)
	}
}
