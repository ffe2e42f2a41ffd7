package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is a chaos run's outcome: the figures and the consistency checks.
type Report struct {
	Seed       uint64        `json:"seed"`
	Tag        string        `json:"tag"` // in every key and customer id of the run
	Started    time.Time     `json:"started"`
	Load       Load          `json:"load"`
	FaultKinds []FaultKind   `json:"fault_kinds"`
	FaultEvery time.Duration `json:"fault_every_ns"`

	Outcomes map[Kind]map[string]int `json:"outcomes"` // kind -> final status ("not accepted", "missing") -> orders
	Answers  map[string]int          `json:"answers"`  // "create 202", "cancel 0 connection refused" -> count

	Faults       []FaultRecord     `json:"faults"`
	FaultsByKind map[FaultKind]int `json:"faults_by_kind"`

	TimeToTerminal Spread `json:"time_to_terminal"` // first POST to the first terminal status
	// LongestStall is the longest time in which no order of the run
	// reached its first terminal status, between the first such moment and
	// the last: how long a fault held the whole saga up.
	LongestStall Stall   `json:"longest_stall"`
	Rest         Rest    `json:"rest"`
	Quiet        Seconds `json:"quiet_window"`
	// Duplicates dropped by each inbox (consumer_duplicates_suppressed_total,
	// summed across restarts; counts since a process's last sample before
	// it was killed are lost, so these are lower bounds).
	Duplicates      map[string]float64 `json:"duplicates_dropped"`
	PaymentsPending int                `json:"payments_pending"` // payments of finished orders still pending
	Notes           []string           `json:"notes,omitempty"`

	Checks     []CheckResult `json:"checks"`
	Violations []Violation   `json:"violations"`

	live *runner // the run, for PlantLive
}

// CheckResult is one row of the consistency table.
type CheckResult struct {
	Name       string `json:"name"`
	Asserts    string `json:"asserts"`
	Violations int    `json:"violations"`
}

// Spread summarises durations.
type Spread struct {
	N   int     `json:"n"`
	P50 Seconds `json:"p50"`
	P95 Seconds `json:"p95"`
	P99 Seconds `json:"p99"`
	Max Seconds `json:"max"`
}

// Stall is a gap between two completions.
type Stall struct {
	Length Seconds `json:"length"`
	From   Seconds `json:"from"` // since the start of the run
}

// Seconds is a duration that reads as seconds in JSON.
type Seconds time.Duration

// MarshalJSON writes seconds with millisecond precision.
func (s Seconds) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf("%.3f", time.Duration(s).Seconds())), nil
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (s *Seconds) UnmarshalJSON(b []byte) error {
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*s = Seconds(f * float64(time.Second))
	return nil
}

func (s Seconds) String() string { return round(time.Duration(s)).String() }

// Passed reports whether no check found a violation.
func (r *Report) Passed() bool { return len(r.Violations) == 0 }

// round keeps durations readable: milliseconds below a second, tenths above.
func round(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}

// summarize fills the figures that come from the snapshot and checks it.
func (r *Report) summarize(s Snapshot) {
	r.Outcomes = map[Kind]map[string]int{}
	r.Answers = map[string]int{}
	var lat []time.Duration
	var done []time.Time
	for _, q := range s.Requests {
		if r.Outcomes[q.Kind] == nil {
			r.Outcomes[q.Kind] = map[string]int{}
		}
		for _, group := range []struct {
			what string
			as   []Answer
		}{{"create", q.Creates}, {"conflict", q.Conflicts}, {"cancel", q.Cancels}} {
			for _, a := range group.as {
				k := fmt.Sprintf("%s %d", group.what, a.Status)
				if a.Status == 0 {
					k = fmt.Sprintf("%s no answer (%s)", group.what, a.Error)
				}
				r.Answers[k]++
			}
		}
		ids := q.OrderIDs()
		if len(ids) == 0 {
			r.Outcomes[q.Kind]["not accepted"]++
			continue
		}
		o, ok := s.Orders[ids[0]]
		if !ok {
			r.Outcomes[q.Kind]["missing"]++
			continue
		}
		r.Outcomes[q.Kind][o.Status]++
		for _, h := range o.History {
			if terminal(h.To) {
				lat = append(lat, h.At.Sub(q.Sent))
				done = append(done, h.At)
				break
			}
		}
	}
	r.TimeToTerminal = spread(lat)
	slices.SortFunc(done, time.Time.Compare)
	for i := 1; i < len(done); i++ {
		if gap := done[i].Sub(done[i-1]); gap > time.Duration(r.LongestStall.Length) {
			r.LongestStall = Stall{Length: Seconds(gap), From: Seconds(done[i-1].Sub(r.Started))}
		}
	}
	for _, o := range s.Orders {
		if o.Payment != nil && o.Payment.Status == "pending" && terminal(o.Status) {
			r.PaymentsPending++
		}
	}
	r.Rest = s.Rest
	r.FaultsByKind = map[FaultKind]int{}
	for _, f := range r.Faults {
		if f.Error == "" {
			r.FaultsByKind[f.Kind]++
		}
	}
	r.Violations = Check(s)
	if r.Violations == nil {
		r.Violations = []Violation{}
	}
	r.Checks = nil
	for _, c := range Checks {
		n := 0
		for _, v := range r.Violations {
			if v.Check == c.Name {
				n++
			}
		}
		r.Checks = append(r.Checks, CheckResult{Name: c.Name, Asserts: c.Asserts, Violations: n})
	}
}

func spread(ds []time.Duration) Spread {
	if len(ds) == 0 {
		return Spread{}
	}
	slices.Sort(ds)
	at := func(q float64) Seconds { return Seconds(ds[min(len(ds)-1, int(q*float64(len(ds))))]) }
	return Spread{N: len(ds), P50: at(0.50), P95: at(0.95), P99: at(0.99), Max: Seconds(ds[len(ds)-1])}
}

// shownPerRule bounds the text report's list of violations per rule.
const shownPerRule = 10

// outcomeColumns are the outcome table's columns, in order.
var outcomeColumns = []string{statusConfirmed, statusRejected, statusCancelled, statusPendingInventory, statusAwaitingPayment, "missing", "not accepted"}

// Print writes the report as text tables.
func (r *Report) Print(w io.Writer) {
	kinds := make([]string, len(r.FaultKinds))
	for i, k := range r.FaultKinds {
		kinds[i] = string(k)
	}
	fmt.Fprintf(w, "chaos run: seed %d, tag %s, load %s at %g orders/s, a fault every %s (%s)\n\n",
		r.Seed, r.Tag, round(r.Load.Duration), r.Load.Rate, round(r.FaultEvery), orNone(strings.Join(kinds, ", ")))

	r.printOutcomes(w)
	fmt.Fprintln(w, "\nanswers to the load")
	for _, k := range sortedKeys(r.Answers) {
		fmt.Fprintf(w, "  %-48s %6d\n", k, r.Answers[k])
	}

	r.printFaults(w)
	r.printTiming(w)
	r.printConsistency(w)
}

// printOutcomes is the table of orders by request kind and outcome.
func (r *Report) printOutcomes(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "orders by outcome\t")
	for _, c := range outcomeColumns {
		fmt.Fprintf(tw, "%s\t", c)
	}
	fmt.Fprintln(tw)
	total := map[string]int{}
	for _, k := range Kinds {
		row := r.Outcomes[k]
		if row == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t", k)
		for _, c := range outcomeColumns {
			fmt.Fprintf(tw, "%d\t", row[c])
			total[c] += row[c]
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprint(tw, "all\t")
	for _, c := range outcomeColumns {
		fmt.Fprintf(tw, "%d\t", total[c])
	}
	fmt.Fprintln(tw)
	tw.Flush()
}

// printFaults lists each fault injected, and the count of each kind.
func (r *Report) printFaults(w io.Writer) {
	fmt.Fprintf(w, "\nfaults (%d)\n", len(r.Faults))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range r.Faults {
		res := f.Detail
		if f.Error != "" {
			res = "NOT INJECTED: " + f.Error
		}
		fmt.Fprintf(tw, "  +%s\t%s\t%s\ttook %s\t%s\n", round(f.Started), f.Kind, f.Target, round(f.Took), res)
	}
	tw.Flush()
	var byKind []string
	for _, k := range AllFaultKinds() {
		if n := r.FaultsByKind[k]; n > 0 {
			byKind = append(byKind, fmt.Sprintf("%s %d", k, n))
		}
	}
	fmt.Fprintf(w, "  by kind: %s\n", orNone(strings.Join(byKind, ", ")))
}

// printTiming is how long orders took, how long the system took to rest,
// and what the inboxes dropped.
func (r *Report) printTiming(w io.Writer) {
	t := r.TimeToTerminal
	fmt.Fprintf(w, "\ntime to terminal (first POST to first terminal status, %d orders): p50 %s, p95 %s, p99 %s, max %s\n",
		t.N, t.P50, t.P95, t.P99, t.Max)
	if st := r.LongestStall; st.Length > 0 {
		fmt.Fprintf(w, "longest stall: %s in which no order finished, from +%s\n", st.Length, st.From)
	}
	if r.Rest.Reached {
		fmt.Fprintf(w, "time to rest: %s after the heal (nothing moved for %s)\n", round(r.Rest.After), r.Quiet)
	} else {
		fmt.Fprintf(w, "time to rest: NOT REACHED in %s (waiting for %s)\n", round(r.Rest.After), r.Rest.Waiting)
	}
	var dups []string
	names := sortedKeys(r.Duplicates)
	for _, n := range names {
		dups = append(dups, fmt.Sprintf("%s %.0f", n, r.Duplicates[n]))
	}
	fmt.Fprintf(w, "duplicates dropped by each inbox: %s\n", orNone(strings.Join(dups, ", ")))
	fmt.Fprintf(w, "payments still pending: %d\n", r.PaymentsPending)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// printConsistency is the verdict of each check, the violations (a few per
// rule) and the final PASS or FAIL line.
func (r *Report) printConsistency(w io.Writer) {
	fmt.Fprintln(w, "\nconsistency")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range r.Checks {
		verdict := "ok"
		if c.Violations > 0 {
			verdict = fmt.Sprintf("%d VIOLATIONS", c.Violations)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Name, verdict, c.Asserts)
	}
	tw.Flush()
	if len(r.Violations) > 0 {
		fmt.Fprintf(w, "\nviolations (%d; at most %d shown per rule, -json lists all)\n", len(r.Violations), shownPerRule)
		rules := map[string]int{}
		for _, v := range r.Violations {
			rule := v.Check + "/" + v.Rule
			rules[rule]++
			switch n := rules[rule]; {
			case n <= shownPerRule:
				fmt.Fprintf(w, "  %s  %s: %s\n", rule, v.Subject, v.Detail)
			case n == shownPerRule+1:
				fmt.Fprintf(w, "  %s  ...\n", rule)
			}
		}
		var parts []string
		for _, k := range sortedKeys(rules) {
			parts = append(parts, fmt.Sprintf("%s %d", k, rules[k]))
		}
		fmt.Fprintf(w, "by rule: %s\n", strings.Join(parts, ", "))
		fmt.Fprintf(w, "\nFAIL: %d violations (seed %d)\n", len(r.Violations), r.Seed)
		return
	}
	fmt.Fprintln(w, "\nPASS: every check holds")
}
