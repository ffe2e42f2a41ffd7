package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// summary is the result of a run; -json prints it as is.
type summary struct {
	Mode         string      `json:"mode"` // "open" or "closed"
	OfferedRate  float64     `json:"offered_rate,omitempty"`
	Workers      int         `json:"workers,omitempty"`
	MaxInflight  int         `json:"max_inflight,omitempty"`
	Mix          []skuWeight `json:"sku_mix"`
	Decline      float64     `json:"decline_share"`
	Overstock    float64     `json:"overstock_share"`
	KeyPrefix    string      `json:"key_prefix"`
	Started      time.Time   `json:"started"`
	SendSeconds  float64     `json:"send_seconds"`
	TotalSeconds float64     `json:"total_seconds"` // send + drain

	Sent        int64   `json:"sent"`
	Accepted    int64   `json:"accepted"`
	Late        int64   `json:"late"`
	MaxLagMs    float64 `json:"max_lag_ms"`
	SentPerSec  float64 `json:"sent_per_s"`
	AcceptedPS  float64 `json:"accepted_per_s"`
	Terminal    int     `json:"terminal"`
	CompletedPS float64 `json:"completed_per_s"` // terminal / (last terminal - start)
	// CompletedInWindowPS counts only orders that finished while the load
	// was still being sent: the sustained rate, without the drain.
	CompletedInWindowPS float64 `json:"completed_in_window_per_s"`

	Outcomes   map[string]int `json:"outcomes"`
	Unexpected map[string]int `json:"unexpected_outcomes,omitempty"` // "<kind>-><status>"
	Reasons    map[string]int `json:"unexpected_reasons,omitempty"`
	Errors     map[string]int `json:"errors"`
	ClockOdd   int64          `json:"clock_anomalies"` // created_at outside the POST: POST->terminal unreliable

	Latency map[string]stats `json:"latency"`

	NonTerminal      []openOrder `json:"non_terminal"`
	NonTerminalCount int         `json:"non_terminal_count"`
	DrainSeconds     float64     `json:"drain_seconds"`

	Follow struct {
		Method      string  `json:"method"`
		Requests    int64   `json:"requests"`
		Rows        int64   `json:"rows"`
		RequestsPS  float64 `json:"requests_per_s"`
		PollSeconds float64 `json:"poll_seconds"`
	} `json:"follow"`

	Processes   []watched `json:"processes,omitempty"`
	MachineBusy float64   `json:"machine_cpu_busy"` // share of all cores busy during the run
	// OtherCores is the CPU used by processes that are not watched (mean
	// and worst second): other work on a shared machine, which disturbs
	// the figures when it is high.
	OtherCores struct {
		Mean float64 `json:"mean"`
		Max  float64 `json:"max"`
	} `json:"other_cores"`
	Timeline []second `json:"timeline"` // cumulative counts, once a second
}

// second is one point of the timeline: counts so far, and the cores other
// processes used during that second (-1: not known).
type second struct {
	T          int     `json:"t"`
	Sent       int64   `json:"sent"`
	Accepted   int64   `json:"accepted"`
	Terminal   int64   `json:"terminal"`
	Open       int     `json:"open"`
	Late       int64   `json:"late"`
	Errors     int     `json:"errors"`
	OtherCores float64 `json:"other_cores"`
}

type openOrder struct {
	OrderID uint64  `json:"order_id"`
	Key     string  `json:"idempotency_key"`
	Status  string  `json:"status"`
	AgeSec  float64 `json:"age_seconds"`
	Kind    kind    `json:"kind"`
}

func (r *runner) summarize(start, sendEnd, end time.Time, procs []watched, busy float64) *summary {
	s := &summary{Mix: r.cfg.mix, Decline: r.cfg.decline, Overstock: r.cfg.overstock, KeyPrefix: r.cfg.keyPrefix,
		Started: start.UTC(), Processes: procs, MachineBusy: busy, DrainSeconds: r.cfg.drain.Seconds()}
	if r.cfg.workers > 0 {
		s.Mode, s.Workers = "closed", r.cfg.workers
	} else {
		s.Mode, s.OfferedRate, s.MaxInflight = "open", r.cfg.rate, r.cfg.maxInflight
	}
	send := sendEnd.Sub(start).Seconds()
	s.SendSeconds = round3(send)
	s.TotalSeconds = round3(end.Sub(start).Seconds())
	s.Sent, s.Accepted, s.Late, s.ClockOdd = r.sent.Load(), r.accepted.Load(), r.late.Load(), r.clockOdd.Load()
	s.MaxLagMs = ms(time.Duration(r.maxLag.Load()))
	if send > 0 {
		s.SentPerSec = round3(float64(s.Sent) / send)
		s.AcceptedPS = round3(float64(s.Accepted) / send)
	}

	r.mu.Lock()
	s.Timeline = slices.Clone(r.timeline)
	s.OtherCores.Mean, s.OtherCores.Max = otherCores(r.timeline)
	s.Terminal = len(r.terminalAt)
	s.Outcomes = maps.Clone(r.outcomes)
	s.Unexpected = maps.Clone(r.unexpected)
	s.Reasons = maps.Clone(r.reasons)
	s.Errors = maps.Clone(r.errs)
	var last time.Time
	inWindow := 0
	for _, t := range r.terminalAt {
		if t.After(last) {
			last = t
		}
		if !t.After(sendEnd) {
			inWindow++
		}
	}
	r.mu.Unlock()
	if s.Terminal > 0 {
		if span := last.Sub(start).Seconds(); span > 0 {
			s.CompletedPS = round3(float64(s.Terminal) / span)
		}
	}
	if send > 0 {
		s.CompletedInWindowPS = round3(float64(inWindow) / send)
	}
	for _, st := range []string{"confirmed", "rejected", "cancelled"} {
		if _, ok := s.Outcomes[st]; !ok {
			s.Outcomes[st] = 0
		}
	}

	s.Latency = map[string]stats{
		"post_to_accepted": r.postAccepted.stats(),
		"post_to_terminal": r.postTerminal.stats(),
	}
	for st, h := range r.byOutcome {
		s.Latency["post_to_"+st] = h.stats()
	}

	open := r.tracker.pending()
	s.NonTerminalCount = len(open)
	for _, o := range open {
		s.NonTerminal = append(s.NonTerminal, openOrder{OrderID: o.id, Key: o.key, Status: o.status,
			AgeSec: round3(end.Sub(o.sent).Seconds()), Kind: o.kind})
	}
	s.Follow.Method = r.cfg.follow
	s.Follow.Requests, s.Follow.Rows = r.tracker.requests.Load(), r.tracker.rows.Load()
	s.Follow.PollSeconds = r.cfg.poll.Seconds()
	if total := end.Sub(start).Seconds(); total > 0 {
		s.Follow.RequestsPS = round3(float64(s.Follow.Requests) / total)
	}
	return s
}

// otherCores is the mean and the worst second of the CPU that unwatched
// processes used, over the seconds where it is known.
func otherCores(timeline []second) (mean, worst float64) {
	n := 0
	for _, sec := range timeline {
		if sec.OtherCores >= 0 {
			mean += sec.OtherCores
			worst = math.Max(worst, sec.OtherCores)
			n++
		}
	}
	if n > 0 {
		mean = round3(mean / float64(n))
	}
	return mean, worst
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

func (s *summary) print(w io.Writer, listMax int) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	if s.Mode == "open" {
		p("open loop: %.1f orders/s offered for %.1fs, at most %d in flight\n", s.OfferedRate, s.SendSeconds, s.MaxInflight)
	} else {
		p("closed loop: %d clients for %.1fs\n", s.Workers, s.SendSeconds)
	}
	p("sent        %-7d %8.1f/s   late %d (max lag %.1f ms)\n", s.Sent, s.SentPerSec, s.Late, s.MaxLagMs)
	p("accepted    %-7d %8.1f/s\n", s.Accepted, s.AcceptedPS)
	p("terminal    %-7d %8.1f/s   (%.1f/s finished within the send window)\n", s.Terminal, s.CompletedPS, s.CompletedInWindowPS)
	p("outcomes    confirmed %d, rejected %d, cancelled %d\n", s.Outcomes["confirmed"], s.Outcomes["rejected"], s.Outcomes["cancelled"])
	if len(s.Unexpected) > 0 {
		p("unexpected  %s\n", kv(s.Unexpected))
		p("  reasons   %s\n", kv(s.Reasons))
	}
	if len(s.Errors) == 0 {
		p("errors      none\n")
	} else {
		p("errors      %s\n", kv(s.Errors))
	}
	if s.ClockOdd > 0 {
		p("clock       %d orders had created_at outside their POST: POST->terminal uses the server clock and may be off\n", s.ClockOdd)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "latency ms\tcount\tmean\tp50\tp90\tp99\tmax\t")
	for _, k := range []string{"post_to_accepted", "post_to_terminal", "post_to_confirmed", "post_to_rejected", "post_to_cancelled"} {
		st := s.Latency[k]
		if st.Count == 0 && k != "post_to_accepted" && k != "post_to_terminal" {
			continue
		}
		name := strings.ReplaceAll(strings.TrimPrefix(k, "post_to_"), "_", " ")
		fmt.Fprintf(tw, "POST->%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", name, st.Count, st.MeanMs, st.P50Ms, st.P90Ms, st.P99Ms, st.MaxMs)
	}
	tw.Flush()
	if s.Follow.Method == "none" {
		p("follow      none: terminal states were not followed\n")
	} else {
		p("not terminal after the %.0fs drain: %d\n", s.DrainSeconds, s.NonTerminalCount)
		for i, o := range s.NonTerminal {
			if i == listMax {
				p("  ... and %d more (-json lists all)\n", len(s.NonTerminal)-listMax)
				break
			}
			p("  order %d  %-18s %-9s age %.1fs  key %s\n", o.OrderID, o.Status, o.Kind, o.AgeSec, o.Key)
		}
		p("follow      list pages: %d requests (%.2f/s), %d rows read\n", s.Follow.Requests, s.Follow.RequestsPS, s.Follow.Rows)
	}
	if len(s.Processes) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "process\tpid\tmax RSS MiB\tVmHWM MiB\tCPU s\tcores\t")
		for _, pr := range s.Processes {
			ex := ""
			if pr.Exited {
				ex = " (exited)"
			}
			fmt.Fprintf(tw, "%s%s\t%d\t%.1f\t%.1f\t%.1f\t%.2f\t\n", pr.Name, ex, pr.PID, pr.MaxRSSMiB, pr.HWMMiB, pr.CPUSec, pr.CPUCores)
		}
		tw.Flush()
		p("machine CPU busy %.0f%%; other processes used %.2f cores on average, %.2f in the worst second\n",
			s.MachineBusy*100, s.OtherCores.Mean, s.OtherCores.Max)
	}
}

func kv(m map[string]int) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
