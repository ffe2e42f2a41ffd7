package endpoints

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// server answers with its name, or with the given status.
func server(t *testing.T, name string, status int) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		io.WriteString(w, name)
	}))
	t.Cleanup(s.Close)
	return s
}

func get(t *testing.T, l *List, moveOn func(error) bool) (string, int, error) {
	t.Helper()
	resp, err := l.Do(context.Background(), http.DefaultClient, moveOn, func(base string) (*http.Request, error) {
		return http.NewRequest(http.MethodGet, base+"/x", nil)
	})
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode, nil
}

// The failover order: a closed first address is passed over for the next;
// the address that worked is asked first from then on, also once the first
// is back; when it goes, the list wraps around.
func TestFailoverOrder(t *testing.T) {
	t.Parallel()
	a := server(t, "a", http.StatusOK)
	b := server(t, "b", http.StatusOK)
	c := server(t, "c", http.StatusOK)
	aURL := a.URL
	a.Close() // the first instance is down
	l := Must(aURL + ", " + b.URL + "/ ," + c.URL)

	if got, _, err := get(t, l, Always); err != nil || got != "b" {
		t.Fatalf("first address down: answered by %q (%v), want b", got, err)
	}
	if l.Current() != b.URL {
		t.Errorf("Current = %q, want b's %q", l.Current(), b.URL)
	}
	if got, _, _ := get(t, l, Always); got != "b" {
		t.Errorf("next request answered by %q, want b (the last that worked)", got)
	}
	b.Close()
	if got, _, err := get(t, l, Always); err != nil || got != "c" {
		t.Errorf("b down too: answered by %q (%v), want c", got, err)
	}
	c.Close()
	if _, _, err := get(t, l, Always); err == nil {
		t.Error("every address down: no error")
	}
}

// An HTTP answer is the service's answer, whatever its status: no failover.
func TestHTTPAnswerIsFinal(t *testing.T) {
	t.Parallel()
	bad := server(t, "bad", http.StatusServiceUnavailable)
	good := server(t, "good", http.StatusOK)
	l := Must(bad.URL + "," + good.URL)
	got, status, err := get(t, l, Always)
	if err != nil || got != "bad" || status != http.StatusServiceUnavailable {
		t.Errorf("got %q %d (%v), want bad's 503", got, status, err)
	}
}

// NotSent moves on after a refused connection (nothing was sent) but not
// after a connection dropped mid-request (the server may have acted).
func TestNotSent(t *testing.T) {
	t.Parallel()
	down := server(t, "down", http.StatusOK)
	downURL := down.URL
	down.Close()
	drop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(drop.Close)
	good := server(t, "good", http.StatusOK)

	if got, _, err := get(t, Must(downURL+","+good.URL), NotSent); err != nil || got != "good" {
		t.Errorf("refused then good: %q (%v), want good", got, err)
	}
	if got, _, err := get(t, Must(drop.URL+","+good.URL), NotSent); err == nil {
		t.Errorf("dropped mid-request: answered by %q, want the error (the answer was lost, not moved on)", got)
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	l, err := Parse(" http://a:1/ , https://b:2/psp")
	if err != nil || !slices.Equal(l.URLs(), []string{"http://a:1", "https://b:2/psp"}) {
		t.Errorf("Parse = %v (%v)", l.URLs(), err)
	}
	for _, bad := range []string{"", " , ", "ftp://a", "http://a:1,not a url"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		} else if strings.Contains(err.Error(), "password") {
			t.Errorf("Parse(%q): %v", bad, err)
		}
	}
}
