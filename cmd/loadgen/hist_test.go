package main

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	// 1..100 ms: the p-th percentile by nearest rank is p ms exactly.
	var h histogram
	for _, i := range rand.Perm(100) {
		h.add(time.Duration(i+1) * time.Millisecond)
	}
	tests := []struct {
		p    float64
		want time.Duration
	}{
		{0.1, 1 * time.Millisecond},
		{1, 1 * time.Millisecond},
		{50, 50 * time.Millisecond},
		{90, 90 * time.Millisecond},
		{99, 99 * time.Millisecond},
		{99.5, 100 * time.Millisecond},
		{100, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := h.percentile(tt.p); got != tt.want {
			t.Errorf("percentile(%v) = %v, want %v", tt.p, got, tt.want)
		}
	}
}

func TestPercentileSmallSets(t *testing.T) {
	tests := []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one sample is every percentile", []time.Duration{7}, 99, 7},
		{"two samples: p50 is the lower", []time.Duration{20, 10}, 50, 10},
		{"two samples: p51 is the upper", []time.Duration{20, 10}, 51, 20},
		{"p99 of ten is the max", []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 100}, 99, 100},
		{"p90 of ten is the ninth", []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 100}, 90, 9},
		{"negative clamps to zero", []time.Duration{-5}, 50, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h histogram
			for _, s := range tt.samples {
				h.add(s)
			}
			if got := h.percentile(tt.p); got != tt.want {
				t.Errorf("percentile(%v) of %v = %v, want %v", tt.p, tt.samples, got, tt.want)
			}
		})
	}
}

func TestStats(t *testing.T) {
	var h histogram
	for _, d := range []time.Duration{4 * time.Millisecond, 1 * time.Millisecond, 2500 * time.Microsecond, 2500 * time.Microsecond} {
		h.add(d)
	}
	got := h.stats()
	want := stats{Count: 4, MeanMs: 2.5, P50Ms: 2.5, P90Ms: 4, P99Ms: 4, MaxMs: 4}
	if got != want {
		t.Errorf("stats = %+v, want %+v", got, want)
	}
	if got := (&histogram{}).stats(); got != (stats{}) {
		t.Errorf("stats of empty = %+v, want zero", got)
	}
}

// Adds after a percentile query must be seen (the sorted flag resets) and
// concurrent adds must not be lost (go test -race).
func TestHistogramConcurrentAndResorted(t *testing.T) {
	var h histogram
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				h.add(time.Duration(g*1000 + i))
				if i%100 == 0 {
					_ = h.percentile(50)
				}
			}
		}()
	}
	wg.Wait()
	if got := h.stats().Count; got != 8000 {
		t.Fatalf("count = %d, want 8000", got)
	}
	h.add(time.Hour)
	if got := h.percentile(100); got != time.Hour {
		t.Fatalf("max after a late add = %v, want 1h", got)
	}
}

// percentile returns the nearest-rank percentile p (0 < p <= 100): the
// smallest sample such that at least p% of the samples are <= it. Zero for
// an empty histogram.
func (h *histogram) percentile(p float64) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sort()
	return h.percentileLocked(p)
}
