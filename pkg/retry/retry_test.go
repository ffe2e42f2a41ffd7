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
		want    time.Duration // the exponential part; jitter adds up to half
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
			if got < tt.want || got > tt.want+tt.want/2 {
				t.Fatalf("Delay(%d) = %v, want within [%v, %v]", tt.attempt, got, tt.want, tt.want+tt.want/2)
			}
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
