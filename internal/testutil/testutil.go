// Package testutil holds the few helpers that tests of several packages
// share: a log buffer a running service can write to while the test reads
// it, and waiting for a condition a background loop makes true.
package testutil

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// SyncBuffer is a bytes.Buffer safe for concurrent use: a service under
// test logs into it from its goroutines while the test reads it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// WaitFor polls cond until it holds, and fails the test if it does not
// within limit. what names the condition in the failure.
func WaitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(limit, cond) {
		t.Fatalf("gave up after %s waiting for %s", limit, what)
	}
}

// WaitForErr is WaitFor for a condition that can fail to be checked (a
// request that errs): it holds when cond reports true and no error, and
// the failure names the last error seen.
func WaitForErr(t testing.TB, limit time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	ok := poll(limit, func() bool {
		ok, err := cond()
		if err != nil {
			last = err
		}
		return ok && err == nil
	})
	if !ok {
		t.Fatalf("gave up after %s waiting for %s (last error: %v)", limit, what, last)
	}
}

// poll checks cond until it holds or limit has passed, first every
// millisecond (a goroutine parking at a failpoint), then less and less
// often, up to every 50 ms (a message crossing the broker).
func poll(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
	}
	return true
}

// Together runs fn(0) to fn(n-1) in n goroutines released at once, and
// returns when all have returned: the start of every race test (callers
// that reach the same row, key or lock at the same moment).
func Together(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			fn(i)
		})
	}
	close(start)
	wg.Wait()
}

// Returned is what a call started by Go returned.
type Returned[T any] struct {
	Value T
	Err   error
}

// Go runs fn in a goroutine of its own and returns the channel its result
// comes on (buffered: fn never waits for a reader): a call the test holds
// somewhere (a paused failpoint, a lock) while it does something else.
func Go[T any](fn func() (T, error)) <-chan Returned[T] {
	done := make(chan Returned[T], 1)
	go func() {
		v, err := fn()
		done <- Returned[T]{Value: v, Err: err}
	}()
	return done
}
