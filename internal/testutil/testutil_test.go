package testutil

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSyncBufferTakesConcurrentWrites(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() { fmt.Fprintf(&b, "line %d\n", i) })
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 20 {
		t.Fatalf("%d lines, want 20:\n%s", n, b.String())
	}
}

func TestPoll(t *testing.T) {
	calls := 0
	if !poll(time.Second, func() bool { calls++; return calls == 3 }) || calls != 3 {
		t.Fatalf("poll: %d calls, want true after 3", calls)
	}
	if poll(20*time.Millisecond, func() bool { return false }) {
		t.Fatal("poll of a condition that never holds reported true")
	}
}

// A failing wait fails the test with its reason.
func TestWaitForErrNamesTheLastError(t *testing.T) {
	ft := &fakeT{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		WaitForErr(ft, 20*time.Millisecond, "the answer", func() (bool, error) { return false, errors.New("connection refused") })
	}()
	<-done
	if !strings.Contains(ft.msg, "the answer") || !strings.Contains(ft.msg, "connection refused") {
		t.Fatalf("failure = %q, want the condition and the last error", ft.msg)
	}
}

// fakeT records a Fatalf and ends the goroutine as testing.T does.
type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// Go hands back what fn returned, once fn has returned.
func TestGoHandsBackTheResult(t *testing.T) {
	release := make(chan struct{})
	boom := errors.New("boom")
	done := Go(func() (int, error) { <-release; return 7, boom })
	select {
	case r := <-done:
		t.Fatalf("a result (%+v) before the call returned", r)
	case <-time.After(10 * time.Millisecond):
	}
	close(release)
	if r := <-done; r.Value != 7 || r.Err != boom {
		t.Fatalf("result = %+v, want 7 and the call's error", r)
	}
}
