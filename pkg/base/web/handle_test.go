package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
)

var errGone = errors.New("thing gone")

func TestEdgeHandle(t *testing.T) {
	edge := func(log *slog.Logger) Edge {
		return Edge{Log: log, Map: func(err error) error {
			if errors.Is(err, errGone) {
				return Errorf(http.StatusNotFound, "thing not found")
			}
			return err
		}}
	}
	for _, c := range []struct {
		name     string
		err      error
		wantCode int
		wantBody string
		wantLog  bool
	}{
		{"success", nil, http.StatusTeapot, `{"ok":true}`, false},
		{"status error", Errorf(http.StatusConflict, "busy"), http.StatusConflict,
			`{"type":"` + ProblemTypeBase + `conflict","title":"Conflict with the current state","status":409,"detail":"busy","instance":"/things/1","error":"busy"}`, false},
		{"domain sentinel, wrapped", fmt.Errorf("load: %w", errGone), http.StatusNotFound,
			`{"type":"` + ProblemTypeBase + `not-found","title":"Not found","status":404,"detail":"thing not found","instance":"/things/1","error":"thing not found"}`, false},
		{"a problem type of its own", Problemf(http.StatusBadRequest, TypeAmbiguousJSON, "key \"a\" appears twice"), http.StatusBadRequest,
			`{"type":"` + ProblemTypeBase + `ambiguous-json","title":"Ambiguous JSON body","status":400,"detail":"key \"a\" appears twice","instance":"/things/1","error":"key \"a\" appears twice"}`, false},
		{"anything else", errors.New("db down at 10.0.0.7"), http.StatusInternalServerError,
			`{"type":"` + ProblemTypeBase + `internal-error","title":"Internal error","status":500,"detail":"internal error","instance":"/things/1","error":"internal error"}`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			h := edge(slog.New(slog.NewTextHandler(&logs, nil))).Handle(func(w http.ResponseWriter, r *http.Request) error {
				if c.err != nil {
					return c.err
				}
				WriteJSON(w, http.StatusTeapot, map[string]bool{"ok": true})
				return nil
			})
			rec := httptest.NewRecorder()
			h(rec, httptest.NewRequest(http.MethodGet, "/things/1", nil))
			var body bytes.Buffer
			if err := json.Compact(&body, rec.Body.Bytes()); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			if rec.Code != c.wantCode || body.String() != c.wantBody {
				t.Errorf("answer = %d %s, want %d %s", rec.Code, &body, c.wantCode, c.wantBody)
			}
			if ct := rec.Header().Get("Content-Type"); c.err != nil && ct != ProblemContentType {
				t.Errorf("Content-Type = %q, want %s", ct, ProblemContentType)
			}
			logged := strings.Count(logs.String(), "request failed")
			if c.wantLog && (logged != 1 || !strings.Contains(logs.String(), "db down")) {
				t.Errorf("log = %q, want the error logged once", logs.String())
			}
			if !c.wantLog && logged != 0 {
				t.Errorf("log = %q, want nothing logged for an answer the client gets", logs.String())
			}
		})
	}
}

// Handle without a mapping: status errors pass, the rest is a 500, and a
// nil logger is allowed.
func TestHandleWithoutMap(t *testing.T) {
	rec := httptest.NewRecorder()
	Handle(nil, func(w http.ResponseWriter, r *http.Request) error {
		return errGone
	})(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), `"internal error"`) {
		t.Errorf("answer = %d %s, want 500 internal error", rec.Code, rec.Body)
	}
}

// Every problem type URI resolves to a section of docs/contract.md: a
// heading "Problem: <slug>", whose GitHub anchor is "problem-<slug>", with
// the type's status and title in it; and every such section is a type.
func TestProblemTypesHaveSections(t *testing.T) {
	b, err := os.ReadFile("../../../docs/contract.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{} // slug -> the section's text
	parts := strings.Split(string(b), "\n#### Problem: ")
	for _, p := range parts[1:] {
		slug, text, _ := strings.Cut(p, "\n")
		text, _, _ = strings.Cut(text, "\n#")
		sections[slug] = text
	}
	codes := map[string]int{}
	for status, typ := range statusTypes {
		codes[typ] = status
	}
	for _, typ := range ProblemTypes() {
		text, ok := sections[typ]
		if !ok {
			t.Errorf("type %s (%s) has no section %q in docs/contract.md", typ, ProblemTypeBase+typ, "#### Problem: "+typ)
			continue
		}
		if !strings.Contains(text, `"`+problemTitles[typ]+`"`) {
			t.Errorf("section %s does not give the title %q", typ, problemTitles[typ])
		}
		if code, ok := codes[typ]; ok && !strings.Contains(text, "`"+strconv.Itoa(code)+"`") {
			t.Errorf("section %s does not give the status %d", typ, code)
		}
	}
	for slug := range sections {
		if _, ok := problemTitles[slug]; !ok {
			t.Errorf("docs/contract.md has a section for %s, which is no problem type", slug)
		}
	}
}
