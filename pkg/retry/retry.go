// Package retry computes the waits between attempts: capped exponential
// backoff plus random jitter, min(cap, base*2^n) + jitter, as the chapter
// prescribes for every retry loop (outbox re-sends, consumer redeliveries,
// PSP status queries), so that a burst of failures does not retry in lockstep.
package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is a capped exponential backoff with jitter.
type Backoff struct {
	Base time.Duration // wait after the first failure (before jitter)
	Cap  time.Duration // no wait exceeds Cap (before jitter)
}

// Delay returns the wait after the given failed attempt (1 = first failure):
// min(Cap, Base*2^(attempt-1)) plus a random jitter of up to half of that.
func (b Backoff) Delay(attempt int) time.Duration {
	d := b.Exp(attempt)
	if d <= 0 {
		return 0
	}
	return d + rand.N(d/2+1)
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
