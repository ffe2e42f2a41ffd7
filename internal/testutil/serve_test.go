package testutil

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Fetch sends the pairs it is given, leaves out the empty ones, and
// returns the status, headers and body.
func TestFetchSendsTheHeadersGiven(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen", fmt.Sprintf("%q %q %q", r.Header.Get("Authorization"), r.Header.Values("Idempotency-Key"), r.Method))
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprint(w, "short and stout")
	}))
	defer srv.Close()
	a := Call(t, http.MethodPost, srv.URL, "{}", "Authorization", Bearer("k"), "Idempotency-Key", "")
	if a.Status != http.StatusTeapot || a.Body != "short and stout" || a.Header.Get("X-Seen") != `"Bearer k" [] "POST"` {
		t.Fatalf("answer = %+v", a)
	}
	if _, err := Fetch(http.MethodGet, srv.URL, "", "Authorization"); err == nil {
		t.Fatal("Fetch took a header name without its value")
	}
	if _, err := Fetch(http.MethodGet, "http://"+FreeAddr(t), ""); err == nil {
		t.Fatal("Fetch from an address nothing listens on returned no error")
	}
}

// Background's stop ends the context and fails the test on an error.
func TestBackgroundStopsAndChecksTheError(t *testing.T) {
	ft := &recordT{TB: t}
	stop := Background(ft, "job", func(ctx context.Context) error {
		<-ctx.Done()
		return errors.New("boom")
	})
	stop()
	stop() // a second stop is a no-op
	if len(ft.errs) != 1 || !strings.Contains(ft.errs[0], "job returned boom") {
		t.Fatalf("errors = %q, want one naming the job and its error", ft.errs)
	}
}

// recordT records Errorf instead of failing the test.
type recordT struct {
	testing.TB
	errs []string
}

func (r *recordT) Helper() {}
func (r *recordT) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
