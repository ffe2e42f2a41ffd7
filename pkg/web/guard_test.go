package web

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

func TestIdempotencyKey(t *testing.T) {
	for _, c := range []struct {
		name    string
		headers []string // one entry per header line; nil: none
		want    string
		typ     string // the problem type when refused
	}{
		{"bare token", []string{"demo-1"}, "demo-1", ""},
		{"quoted string (draft-07)", []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "8e03978e-40d5-43e8-bc93-6894a57f9324", ""},
		{"quoted with escapes and spaces", []string{`"a \"b\" \\c"`}, `a "b" \c`, ""},
		{"blanks around", []string{" \t\"k-1\" "}, "k-1", ""},
		{"missing", nil, "", TypeKeyMissing},
		{"two header lines", []string{"a", "b"}, "", TypeKeyInvalid},
		{"a bare list", []string{"a,b"}, "", TypeKeyInvalid},
		{"a quoted list", []string{`"a", "b"`}, "", TypeKeyInvalid},
		{"parameters", []string{`"a";x=1`}, "", TypeKeyInvalid},
		{"empty quoted", []string{`""`}, "", TypeKeyInvalid},
		{"empty", []string{""}, "", TypeKeyInvalid},
		{"no closing quote", []string{`"abc`}, "", TypeKeyInvalid},
		{"bad escape", []string{`"a\nb"`}, "", TypeKeyInvalid},
		{"space in a bare key", []string{"a b"}, "", TypeKeyInvalid},
		{"tab in a bare key", []string{"a\tb"}, "", TypeKeyInvalid},
		{"tab in a quoted key", []string{"\"a\tb\""}, "", TypeKeyInvalid},
		{"non-ASCII", []string{"clé"}, "", TypeKeyInvalid},
		{"quote inside a bare key", []string{`a"b`}, "", TypeKeyInvalid},
		{"too long", []string{strings.Repeat("k", MaxKeyLen+1)}, "", TypeKeyInvalid},
		{"longest", []string{strings.Repeat("k", MaxKeyLen)}, strings.Repeat("k", MaxKeyLen), ""},
		{"too long quoted", []string{`"` + strings.Repeat("k", MaxKeyLen+1) + `"`}, "", TypeKeyInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/orders", nil)
			for _, v := range c.headers {
				r.Header.Add("Idempotency-Key", v)
			}
			got, err := IdempotencyKey(r)
			if c.typ == "" {
				if err != nil || got != c.want {
					t.Errorf("IdempotencyKey(%q) = %q, %v, want %q", c.headers, got, err, c.want)
				}
				return
			}
			var we *Error
			if !errors.As(err, &we) || we.Status != http.StatusBadRequest || we.typ() != c.typ {
				t.Errorf("IdempotencyKey(%q) = %q, %v, want 400 %s", c.headers, got, err, c.typ)
			}
		})
	}
}

func TestInFlight(t *testing.T) {
	var f InFlight
	end, err := f.Begin("create", "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Begin("create", "k"); !isProblem(err, http.StatusConflict, TypeKeyInFlight) {
		t.Errorf("the same key in flight: %v, want 409 %s", err, TypeKeyInFlight)
	}
	endCancel, err := f.Begin("cancel", "k")
	if err != nil {
		t.Errorf("the same key in another scope: %v, want it free", err)
	} else {
		endCancel()
	}
	end()
	if end2, err := f.Begin("create", "k"); err != nil {
		t.Errorf("after the first ended: %v", err)
	} else {
		end2()
	}
}

func isProblem(err error, status int, typ string) bool {
	var we *Error
	return errors.As(err, &we) && we.Status == status && we.typ() == typ
}

type sent struct {
	method, host, path string
	header             map[string]string
}

func (s sent) request() *http.Request {
	r := httptest.NewRequest(s.method, "http://placeholder"+s.path, nil)
	r.Host = s.host
	for k, v := range s.header {
		r.Header.Set(k, v)
	}
	return r
}

// The guard refuses what a page of another site could send, and lets
// programs and this origin's own page through.
func TestGuard(t *testing.T) {
	h := Guard{Hosts: []string{"order", "Payment-Fake."}}.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	for _, c := range []struct {
		name   string
		req    sent
		status int
		typ    string
	}{
		{"loopback v4", sent{"GET", "127.0.0.1:8081", "/orders", nil}, 204, ""},
		{"loopback v4 elsewhere in 127/8", sent{"GET", "127.0.0.2", "/orders", nil}, 204, ""},
		{"loopback v6", sent{"GET", "[::1]:8081", "/orders", nil}, 204, ""},
		{"localhost", sent{"GET", "LOCALHOST:8081", "/orders", nil}, 204, ""},
		{"a .localhost name", sent{"GET", "viewer.localhost:8080", "/", nil}, 204, ""},
		{"a configured name", sent{"GET", "order:8081", "/orders", nil}, 204, ""},
		{"a configured name, case and dot", sent{"GET", "payment-fake:8083", "/payments/1", nil}, 204, ""},
		{"foreign host", sent{"GET", "evil.example", "/orders", nil}, 403, TypeForeignHost},
		{"foreign host with port", sent{"PUT", "evil.example:8080", "/debug/failpoints/x", nil}, 403, TypeForeignHost},
		{"rebinding-style name", sent{"GET", "127.0.0.1.nip.io:8081", "/orders", nil}, 403, TypeForeignHost},
		{"all interfaces", sent{"GET", "0.0.0.0:8081", "/orders", nil}, 403, TypeForeignHost},
		{"integer address", sent{"GET", "2130706433:8081", "/orders", nil}, 403, TypeForeignHost},
		{"no host", sent{"GET", "", "/orders", nil}, 403, TypeForeignHost},
		{"program POST (no Origin)", sent{"POST", "127.0.0.1:8081", "/orders", nil}, 204, ""},
		{"same-origin page POST", sent{"POST", "127.0.0.1:8080", "/api/orders",
			map[string]string{"Origin": "http://127.0.0.1:8080", "Sec-Fetch-Site": "same-origin"}}, 204, ""},
		{"foreign Origin PUT", sent{"PUT", "127.0.0.1:8080", "/api/wrong-way/order",
			map[string]string{"Origin": "http://evil.example"}}, 403, TypeCrossOrigin},
		{"simple cross-site form POST", sent{"POST", "127.0.0.1:8080", "/api/failpoints/order/x/release",
			map[string]string{"Origin": "http://evil.example", "Content-Type": "application/x-www-form-urlencoded"}}, 403, TypeCrossOrigin},
		{"cross-site by Sec-Fetch-Site alone", sent{"DELETE", "127.0.0.1:8080", "/api/failpoints/order",
			map[string]string{"Sec-Fetch-Site": "cross-site"}}, 403, TypeCrossOrigin},
		{"another port of this machine", sent{"POST", "127.0.0.1:8081", "/orders",
			map[string]string{"Origin": "http://127.0.0.1:3000"}}, 403, TypeCrossOrigin},
		{"null Origin", sent{"POST", "127.0.0.1:8081", "/orders", map[string]string{"Origin": "null"}}, 403, TypeCrossOrigin},
		{"foreign Origin on a GET (reads are not state changes)", sent{"GET", "127.0.0.1:8081", "/orders",
			map[string]string{"Origin": "http://evil.example"}}, 204, ""},
		{"dot-dot", sent{"GET", "127.0.0.1:8081", "/orders/../admin/outbox", nil}, 400, TypeNotClean},
		{"double slash", sent{"GET", "127.0.0.1:8081", "//admin/outbox", nil}, 400, TypeNotClean},
		{"dot segment", sent{"GET", "127.0.0.1:8081", "/orders/./1", nil}, 400, TypeNotClean},
		{"encoded dot-dot", sent{"GET", "127.0.0.1:8081", "/orders/%2e%2e/admin", nil}, 400, TypeNotClean},
		{"encoded NUL", sent{"GET", "127.0.0.1:8081", "/orders/1%00", nil}, 400, TypeNotClean},
		{"trailing slash is fine", sent{"GET", "127.0.0.1:8081", "/debug/failpoints/", nil}, 204, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, c.req.request())
			if rec.Code != c.status {
				t.Fatalf("%s %s Host %q = %d %s, want %d", c.req.method, c.req.path, c.req.host, rec.Code, rec.Body, c.status)
			}
			if c.typ != "" {
				checkProblem(t, rec, c.status, c.typ)
			}
		})
	}
}

func checkProblem(t *testing.T, rec *httptest.ResponseRecorder, status int, typ string) {
	t.Helper()
	var p Problem
	if ct := rec.Header().Get("Content-Type"); ct != ProblemContentType {
		t.Errorf("Content-Type = %q, want %s", ct, ProblemContentType)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Status != status || p.Type != ProblemTypeBase+typ ||
		p.Title == "" || p.Detail == "" || p.Instance == "" {
		t.Errorf("problem = %s (%v), want status %d, type %s, a title, a detail and an instance", rec.Body, err, status, typ)
	}
}

func TestRequireToken(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	for _, c := range []struct {
		name, token string
		open        bool
		auth        string
		status      int
	}{
		{"open without a token", "", true, "", 204},
		{"closed without a token", "", false, "Bearer x", 403},
		{"no header", "s3cret", true, "", 401},
		{"wrong token", "s3cret", true, "Bearer nope", 401},
		{"a prefix of it", "s3cret", true, "Bearer s3c", 401},
		{"another scheme", "s3cret", true, "Basic s3cret", 401},
		{"right token", "s3cret", true, "Bearer s3cret", 204},
		{"scheme in another case", "s3cret", false, "bearer s3cret", 204},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPut, "/debug/wrong-way", nil)
			if c.auth != "" {
				r.Header.Set("Authorization", c.auth)
			}
			rec := httptest.NewRecorder()
			RequireToken(c.token, c.open, "ADMIN_TOKEN")(ok).ServeHTTP(rec, r)
			if rec.Code != c.status {
				t.Fatalf("= %d %s, want %d", rec.Code, rec.Body, c.status)
			}
			if c.status >= 400 {
				checkProblem(t, rec, c.status, statusTypes[c.status])
			}
		})
	}
}

// RateLimit lets a burst through, then answers 429 with Retry-After; the
// bucket refills with time (not waited for here: a refill of 0 per second
// keeps the test free of clocks).
func TestRateLimit(t *testing.T) {
	h := RateLimit(0, 3)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	var codes []int
	for range 5 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/payments/1/outcome", nil))
		codes = append(codes, rec.Code)
		if rec.Code == http.StatusTooManyRequests {
			checkProblem(t, rec, http.StatusTooManyRequests, TypeTooManyRequests)
			if rec.Header().Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
		}
	}
	if want := []int{204, 204, 204, 429, 429}; !slices.Equal(codes, want) {
		t.Errorf("codes = %v, want %v", codes, want)
	}
}
