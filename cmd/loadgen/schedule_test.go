package main

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestScheduleAt(t *testing.T) {
	s := schedule{start: t0, rate: 300}
	tests := []struct {
		i    int
		want time.Duration
	}{
		{0, 0},
		{1, 3333333 * time.Nanosecond},
		{3, 10 * time.Millisecond},
		{300, time.Second},
		{18000, time.Minute}, // no drift after a minute at 300/s
	}
	for _, tt := range tests {
		if got := s.at(tt.i).Sub(t0); got != tt.want {
			t.Errorf("at(%d) = start+%v, want start+%v", tt.i, got, tt.want)
		}
	}
}

func TestScheduleDue(t *testing.T) {
	tests := []struct {
		name string
		s    schedule
		now  time.Duration // after start
		want int
	}{
		{"before start", schedule{start: t0, rate: 100}, -time.Millisecond, 0},
		{"at start: send 0 is due", schedule{start: t0, rate: 100}, 0, 1},
		{"just before send 1", schedule{start: t0, rate: 100}, 10*time.Millisecond - 1, 1},
		{"exactly at send 1", schedule{start: t0, rate: 100}, 10 * time.Millisecond, 2},
		{"one second at 100/s", schedule{start: t0, rate: 100}, time.Second - 1, 100},
		{"fractional rate", schedule{start: t0, rate: 0.5}, 3 * time.Second, 2},
		{"capped by count", schedule{start: t0, rate: 100, count: 5}, time.Hour, 5},
		{"capped by end", schedule{start: t0, rate: 100, end: t0.Add(time.Second)}, time.Hour, 100},
		{"end and count: the smaller", schedule{start: t0, rate: 100, count: 500, end: t0.Add(time.Second)}, time.Hour, 100},
		{"rate that does not divide a second", schedule{start: t0, rate: 300}, 10 * time.Millisecond, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.due(t0.Add(tt.now)); got != tt.want {
				t.Errorf("due(start+%v) = %d, want %d", tt.now, got, tt.want)
			}
		})
	}
}

func TestScheduleTotalAndDone(t *testing.T) {
	tests := []struct {
		name  string
		s     schedule
		total int
	}{
		{"duration only", schedule{start: t0, rate: 200, end: t0.Add(time.Minute)}, 12000},
		{"count only", schedule{start: t0, rate: 200, count: 7}, 7},
		{"both: the duration is shorter", schedule{start: t0, rate: 200, count: 50000, end: t0.Add(time.Minute)}, 12000},
		{"both: the count is smaller", schedule{start: t0, rate: 200, count: 10, end: t0.Add(time.Minute)}, 10},
		{"no bound", schedule{start: t0, rate: 200}, -1},
		{"end before start", schedule{start: t0, rate: 200, end: t0.Add(-time.Second)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.total(); got != tt.total {
				t.Fatalf("total = %d, want %d", got, tt.total)
			}
			if tt.total < 0 {
				if tt.s.done(1 << 30) {
					t.Fatal("an unbounded schedule is never done")
				}
				return
			}
			if tt.total > 0 && tt.s.done(tt.total-1) {
				t.Errorf("done(%d) = true, want false", tt.total-1)
			}
			if !tt.s.done(tt.total) {
				t.Errorf("done(%d) = false, want true", tt.total)
			}
			// Every send of the schedule is due before its end.
			if tt.total > 0 && !tt.s.end.IsZero() && !tt.s.at(tt.total-1).Before(tt.s.end) {
				t.Errorf("last send at %v, not before end %v", tt.s.at(tt.total-1), tt.s.end)
			}
		})
	}
}

// Walking the schedule in arbitrary clock steps yields every send exactly
// once and never one before its time: what openLoop relies on.
func TestScheduleWalk(t *testing.T) {
	s := schedule{start: t0, rate: 333, end: t0.Add(2 * time.Second)}
	next := 0
	for now := t0; now.Before(t0.Add(3 * time.Second)); now = now.Add(7 * time.Millisecond) {
		for due := s.due(now); next < due; next++ {
			if s.at(next).After(now) {
				t.Fatalf("send %d is due at %v, handed out at %v", next, s.at(next), now)
			}
		}
	}
	if next != s.total() || next != 666 {
		t.Fatalf("sent %d, want total %d = 666", next, s.total())
	}
}
