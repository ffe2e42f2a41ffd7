package retry

import (
	"context"
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Base: 100 * time.Millisecond, Cap: time.Second}
	tests := []struct {
		attempt int
		want    time.Duration // the bound: min(Cap, Base*2^(attempt-1))
	}{
		{0, 100 * time.Millisecond},
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{3, 400 * time.Millisecond},
		{4, 800 * time.Millisecond},
		{5, time.Second},
		{60, time.Second}, // no overflow for large attempt numbers
	}
	for _, tt := range tests {
		if got := b.Exp(tt.attempt); got != tt.want {
			t.Errorf("Exp(%d) = %v, want %v", tt.attempt, got, tt.want)
		}
		for i := 0; i < 100; i++ {
			got := b.Delay(tt.attempt)
			if got < tt.want/2 || got > tt.want {
				t.Fatalf("Delay(%d) = %v, want within [%v, %v]", tt.attempt, got, tt.want/2, tt.want)
			}
		}
	}
}

// The cap is the longest wait, jitter included: the outbox's 5-minute cap
// once allowed 7.5 minutes, the consumer's 1-minute cap 90 seconds.
func TestBackoffNeverExceedsTheCap(t *testing.T) {
	for _, b := range []Backoff{
		{Base: time.Second, Cap: 5 * time.Minute},        // the outbox's defaults
		{Base: 500 * time.Millisecond, Cap: time.Minute}, // the consumers' defaults
		{Base: 3 * time.Millisecond, Cap: 7 * time.Millisecond},
	} {
		var longest time.Duration
		for attempt := 1; attempt <= 30; attempt++ {
			for i := 0; i < 200; i++ {
				longest = max(longest, b.Delay(attempt))
			}
		}
		if longest > b.Cap {
			t.Errorf("%+v: longest wait %v, want at most the cap %v", b, longest, b.Cap)
		}
		if longest < b.Cap*3/4 {
			t.Errorf("%+v: longest wait %v in 6,000 draws, want close to the cap %v (jitter spans [cap/2, cap])", b, longest, b.Cap)
		}
	}
}

func TestBackoffJitterSpreads(t *testing.T) {
	b := Backoff{Base: time.Second, Cap: time.Minute}
	seen := map[time.Duration]bool{}
	for i := 0; i < 50; i++ {
		seen[b.Delay(3)] = true
	}
	if len(seen) < 10 {
		t.Fatalf("50 delays gave only %d distinct values: jitter is missing", len(seen))
	}
}

func TestWaitStopsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Wait(ctx, time.Hour) {
		t.Fatal("Wait on an ended context reported a full wait")
	}
	if !Wait(context.Background(), time.Millisecond) {
		t.Fatal("Wait of 1ms on a live context reported an interruption")
	}
}

func TestEveryTicksUntilTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	Every(ctx, time.Millisecond, func() {
		if calls++; calls == 3 {
			cancel()
		}
	})
	if calls != 3 {
		t.Fatalf("f ran %d times, want 3 (stopped by the cancel in its third call)", calls)
	}
}

func TestEveryFromNowCallsAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	EveryFromNow(ctx, time.Hour, func() { calls++ })
	if calls != 1 {
		t.Fatalf("f ran %d times on an ended context, want once: at once, before any tick", calls)
	}
}
