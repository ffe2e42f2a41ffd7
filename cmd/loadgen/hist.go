package main

import (
	"math"
	"slices"
	"sync"
	"time"
)

// histogram keeps every latency sample and answers percentiles exactly
// (nearest rank). A run of 300 orders/s for 60 s is 18,000 samples, 144 KB:
// exact answers are cheaper than explaining a bucketed approximation.
type histogram struct {
	mu      sync.Mutex
	samples []time.Duration
	sorted  bool
}

func (h *histogram) add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.mu.Lock()
	h.samples = append(h.samples, d)
	h.sorted = false
	h.mu.Unlock()
}

// stats is what the summary prints for one latency: milliseconds.
type stats struct {
	Count  int     `json:"count"`
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
}

func (h *histogram) stats() stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sort()
	s := stats{Count: len(h.samples)}
	if s.Count == 0 {
		return s
	}
	var sum time.Duration
	for _, d := range h.samples {
		sum += d
	}
	s.MeanMs = ms(sum / time.Duration(s.Count))
	s.P50Ms = ms(h.percentileLocked(50))
	s.P90Ms = ms(h.percentileLocked(90))
	s.P99Ms = ms(h.percentileLocked(99))
	s.MaxMs = ms(h.samples[len(h.samples)-1])
	return s
}

func (h *histogram) percentileLocked(p float64) time.Duration {
	n := len(h.samples)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	rank = min(max(rank, 1), n)
	return h.samples[rank-1]
}

func (h *histogram) sort() {
	if !h.sorted {
		slices.Sort(h.samples)
		h.sorted = true
	}
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
