package testutil

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// FreeAddr returns a local address (127.0.0.1:port) nothing listens on,
// for a process the test starts to listen on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// stopLimit is how long a stopped process may take to return: its
// shutdown timeouts in the tests are 10 s.
const stopLimit = 30 * time.Second

// Background runs fn in a goroutine until the test ends, or until the
// returned stop is called (once or more). Stopping cancels fn's context
// and waits for fn to return; the test fails if it returns an error, or
// has not returned within 30 s. what names fn in the failure.
func Background(t testing.TB, what string, fn func(ctx context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s returned %v after its context ended, want nil", what, err)
			}
		case <-time.After(stopLimit):
			t.Errorf("%s did not return within %s of its context ending", what, stopLimit)
		}
	}
	t.Cleanup(stop)
	return stop
}

// Run is what a program's main calls (the services' and the PSP's run):
// it reads its settings through getenv and logs to stdout.
type Run func(ctx context.Context, getenv func(string) string, stdout io.Writer) error

// Process runs run on env as Background does, and shows its log if the
// test failed.
func Process(t testing.TB, run Run, env map[string]string) (stop func()) {
	t.Helper()
	logs := &SyncBuffer{}
	t.Cleanup(func() {
		// Registered first, so it runs after the stop below.
		if t.Failed() {
			t.Logf("process log:\n%s", logs.String())
		}
	})
	return Background(t, "Run", func(ctx context.Context) error {
		return run(ctx, func(k string) string { return env[k] }, logs)
	})
}

// WaitReady waits until GET base/readyz answers 200.
func WaitReady(t testing.TB, base string) {
	t.Helper()
	WaitForErr(t, stopLimit, base+" to be ready", func() (bool, error) {
		a, err := Fetch(http.MethodGet, base+"/readyz", "")
		return a.Status == http.StatusOK, err
	})
}

// Answer is what an HTTP request got back.
type Answer struct {
	Status int
	Header http.Header
	Body   string
}

// client bounds every request, so a process that hangs fails the test
// instead of stalling it.
var client = &http.Client{Timeout: stopLimit}

// Fetch sends one request with body (none when empty) and headers, given
// as name, value pairs (a pair whose value is empty is left out), and
// reads the whole answer. For a request that may fail, as one polling a
// process that is starting does.
func Fetch(method, url, body string, headers ...string) (Answer, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return Answer{}, err
	}
	if len(headers)%2 != 0 {
		return Answer{}, fmt.Errorf("headers %q: want name, value pairs", headers)
	}
	for i := 0; i < len(headers); i += 2 {
		if headers[i+1] != "" {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return Answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Answer{}, fmt.Errorf("%s %s: read body: %w", method, url, err)
	}
	return Answer{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}, nil
}

// Call is Fetch for a request that must be answered: an error fails the
// test.
func Call(t testing.TB, method, url, body string, headers ...string) Answer {
	t.Helper()
	a, err := Fetch(method, url, body, headers...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return a
}

// Bearer is the Authorization header's value for token, or empty (no
// header, with Fetch) when token is.
func Bearer(token string) string {
	if token == "" {
		return ""
	}
	return "Bearer " + token
}
