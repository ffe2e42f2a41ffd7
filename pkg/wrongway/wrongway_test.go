package wrongway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		spec    string
		want    string
		wantErr bool
	}{
		{"", "", false},
		{"no-inbox", "no-inbox", false},
		{" ack-before-commit , no-inbox ", "ack-before-commit,no-inbox", false},
		{"no-inbox,typo", "no-inbox", true},
	}
	for _, tt := range tests {
		on, err := Parse(tt.spec)
		got := NewSet(on)
		if (err != nil) != tt.wantErr || got.String() != tt.want {
			t.Errorf("Parse(%q) = %q, %v; want %q, error %v", tt.spec, got, err, tt.want, tt.wantErr)
		}
	}
	var none *Set
	if none.On(NoInbox) || NewSet(nil).On(NoInbox) {
		t.Fatal("empty set has a switch on")
	}
}

// The demo endpoint: GET shows the set, PUT replaces it, and every refusal
// is a JSON error that leaves the set as it was.
func TestHandler(t *testing.T) {
	s := NewSet(nil)
	h := s.Handler(nil)
	call := func(method, body string) (int, string) {
		t.Helper()
		req := httptest.NewRequest(method, "/debug/wrong-way", strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	for _, c := range []struct {
		method, body string
		wantCode     int
		wantBody     string // a part of the answer
		wantOn       string // the set afterwards
	}{
		{http.MethodGet, "", http.StatusOK, `"on": []`, ""},
		{http.MethodPut, `{"on":["no-inbox","ack-before-commit"]}`, http.StatusOK, `"on": [
    "ack-before-commit",
    "no-inbox"
  ]`, "ack-before-commit,no-inbox"},
		{http.MethodPut, `{"on":["no-inbox","typo"]}`, http.StatusBadRequest, `unknown wrong-way switch \"typo\"`, "ack-before-commit,no-inbox"},
		{http.MethodPut, `{"on":`, http.StatusBadRequest, `"error": "malformed JSON`, "ack-before-commit,no-inbox"},
		{http.MethodDelete, "", http.StatusMethodNotAllowed, `"error": "use GET or PUT"`, "ack-before-commit,no-inbox"},
		{http.MethodPut, `{"on":[]}`, http.StatusOK, `"on": []`, ""},
	} {
		code, body := call(c.method, c.body)
		if code != c.wantCode || !strings.Contains(body, c.wantBody) || s.String() != c.wantOn {
			t.Errorf("%s %s = %d %s (set %q), want %d with %s (set %q)",
				c.method, c.body, code, body, s, c.wantCode, c.wantBody, c.wantOn)
		}
	}
}

// A picker takes the wrong way while its switch is on, and the right way
// otherwise; switching at run time takes effect at the next pick.
func TestPickFollowsTheSwitchesAtRunTime(t *testing.T) {
	s := NewSet(nil)
	pick := Pick(s, "right", Alt[string]{NoInbox, "check-then-insert"}, Alt[string]{DedupeOwnTx, "dedupe first"})
	if got := pick(); got != "right" {
		t.Fatalf("no switch on: %q, want right", got)
	}
	s.Replace(map[Switch]bool{DedupeOwnTx: true})
	if got := pick(); got != "dedupe first" {
		t.Fatalf("dedupe-own-tx on: %q", got)
	}
	s.Replace(map[Switch]bool{DedupeOwnTx: true, NoInbox: true})
	if got := pick(); got != "check-then-insert" {
		t.Fatalf("both on: %q, want the first alternate", got)
	}
	if got := Pick[string](nil, "right", Alt[string]{NoInbox, "x"})(); got != "right" {
		t.Fatalf("no set: %q, want right", got)
	}
}
