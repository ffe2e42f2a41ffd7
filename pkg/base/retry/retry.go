// Package retry computes the waits between attempts: capped exponential
// backoff with random jitter inside the cap, as the chapter prescribes for
// every retry loop (有限重试与死信: min(cap, base × 2^attempt) is the upper
// bound, then jitter), so that a burst of failures does not retry in
// lockstep and no wait ever exceeds the cap the operator configured.
package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is a capped exponential backoff with jitter.
type Backoff struct {
	Base time.Duration // wait after the first failure (before jitter)
	Cap  time.Duration // no wait exceeds Cap, jitter included
}

// Delay returns the wait after the given failed attempt (1 = first failure):
// "equal jitter" under the bound e = min(Cap, Base*2^(attempt-1)), a random
// wait in [e/2, e]. The jitter is taken out of the bound, never added on top
// of it: a configured cap of five minutes means five minutes at the most.
// Half of the bound stays fixed so that a retry is never immediate.
func (b Backoff) Delay(attempt int) time.Duration {
	e := b.Exp(attempt)
	if e <= 0 {
		return 0
	}
	half := e / 2
	return half + rand.N(e-half+1)
}

// Exp is the wait without jitter: min(Cap, Base*2^(attempt-1)).
func (b Backoff) Exp(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := b.Base
	for i := 1; i < attempt; i++ {
		d *= 2
		if b.Cap > 0 && d >= b.Cap {
			return b.Cap
		}
	}
	if b.Cap > 0 && d > b.Cap {
		return b.Cap
	}
	return d
}

// Wait waits d or until ctx ends, whichever comes first, and reports
// whether the full wait passed (false: stop retrying, ctx has ended). Every
// retry loop sleeps through it, so shutdown never waits out a backoff.
func Wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Every calls f every interval until ctx ends, the first time one interval
// from now: the loop of a periodic job. f logs its own failure; the next
// tick is its retry.
func Every(ctx context.Context, interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f()
	}
}

// EveryFromNow is Every with the first call at once: the loop of a sweep
// that also clears, at start, what came due while the process was down.
func EveryFromNow(ctx context.Context, interval time.Duration, f func()) {
	f()
	Every(ctx, interval, f)
}
