package main

import (
	"math"
	"time"
)

// schedule is the open-loop timetable: send i is due at start + i/rate,
// whatever happened to the sends before it. Computing each time from the
// start (not by adding an interval to the previous one) keeps the rate
// exact over a long run: timer slack never accumulates.
type schedule struct {
	start time.Time
	rate  float64   // sends per second, > 0
	count int       // total sends; 0: unlimited
	end   time.Time // no send is due at or after end; zero: no end
}

// at is when send i (from 0) is due.
func (s schedule) at(i int) time.Time {
	return s.start.Add(time.Duration(float64(i) / s.rate * float64(time.Second)))
}

// total is how many sends the schedule holds, or -1 when it is unbounded.
func (s schedule) total() int {
	n := -1
	if s.count > 0 {
		n = s.count
	}
	if !s.end.IsZero() {
		// Sends strictly before end: i/rate < end-start.
		span := s.end.Sub(s.start).Seconds()
		m := int(math.Ceil(span * s.rate))
		if m < 0 {
			m = 0
		}
		if n < 0 || m < n {
			n = m
		}
	}
	return n
}

// due is how many sends should have started by now.
func (s schedule) due(now time.Time) int {
	if now.Before(s.start) {
		return 0
	}
	n := int(math.Floor(now.Sub(s.start).Seconds()*s.rate)) + 1
	// Floating point may land a hair below an exact boundary: trust at().
	for !s.at(n).After(now) {
		n++
	}
	for n > 0 && s.at(n-1).After(now) {
		n--
	}
	if t := s.total(); t >= 0 && n > t {
		n = t
	}
	return n
}

// done reports whether every send has been made after sent sends.
func (s schedule) done(sent int) bool {
	t := s.total()
	return t >= 0 && sent >= t
}
