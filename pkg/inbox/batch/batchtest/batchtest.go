// Package batchtest is the harness of the differential tests that hold the
// batch layer (pkg/inbox/batch) to the chapter's path: the same generated
// sequence of deliveries runs through a consumer one at a time and through
// its batch layer, each on a database of its own, and every row, every
// event written, every external call and every decision must come out the
// same. Each service's test says what to generate and which rows to
// compare; this package cuts, runs and compares.
package batchtest

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"
	"pgregory.net/rapid"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// TB is what the checks need of a *testing.T or a *rapid.T.
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// Step is one thing that happens to a consumer: a take of deliveries (what
// a worker holds at once), or an action outside the consumer (a sweep, an
// API call, time passing) made the same way in both runs.
type Step struct {
	Take   []rabbit.Delivery
	Action string // the action's name, for the log of a counterexample
}

func (s Step) String() string {
	if s.Action != "" {
		return "action " + s.Action
	}
	parts := make([]string, len(s.Take))
	for i, d := range s.Take {
		parts[i] = Label(d)
	}
	return "take [" + strings.Join(parts, ", ") + "]"
}

// Label names a delivery in a counterexample: its type, aggregate, the
// first characters of its id, and what is special about it.
func Label(d rabbit.Delivery) string {
	id := d.MessageId
	if len(id) > 8 {
		id = id[:8]
	}
	s := fmt.Sprintf("%s #%v %s", d.Type, d.Headers[events.HeaderAggregateID], id)
	if d.Redelivered {
		s += " redelivered"
	}
	if d.Attempt > 1 {
		s += fmt.Sprintf(" attempt %d", d.Attempt)
	}
	return s
}

// A System is one of the two runs: a consumer on a database of its own.
type System struct {
	One  rabbit.Handler                               // the chapter's path (inbox.Consumer.Handle)
	Many rabbit.BatchHandler                          // the batch layer (batch.Consumer.HandleBatch)
	Act  func(ctx context.Context, name string) error // performs a Step's action
	// Prepare resets the system's tables and seeds them, the same way in
	// both runs.
	Prepare func(ctx context.Context) error
	// Rows reads what the comparison compares (see Rows).
	Rows func(ctx context.Context) (map[string][]string, error)
}

// Same prepares both systems, runs steps one at a time in one and in
// batches of size in many, side by side (they share nothing), and fails t
// on the first difference in their rows or their decisions. It returns
// the decisions.
func Same(t TB, one, many System, steps []Step, size int) []string {
	t.Helper()
	ctx := context.Background()
	type result struct {
		decisions []string
		rows      map[string][]string
		err       error
	}
	run := func(s System, size int) (r result) {
		if r.err = s.Prepare(ctx); r.err != nil {
			return r
		}
		if r.decisions, r.err = Run(ctx, s, steps, size); r.err != nil {
			return r
		}
		r.rows, r.err = s.Rows(ctx)
		return r
	}
	done := make(chan result)
	go func() { done <- run(many, size) }()
	rOne := run(one, 1)
	rMany := <-done
	if rOne.err != nil || rMany.err != nil {
		t.Fatalf("one at a time: %v; in batches: %v", rOne.err, rMany.err)
	}
	if diff := Diff(rOne.rows, rMany.rows); diff != "" {
		t.Fatalf("batches of %d ended otherwise than one at a time:\n%ssteps: %v", size, diff, steps)
	}
	if !slices.Equal(rOne.decisions, rMany.decisions) {
		t.Fatalf("decisions one at a time %v, in batches of %d %v\nsteps: %v", rOne.decisions, size, rMany.decisions, steps)
	}
	return rMany.decisions
}

// Run processes steps in sys: every take one delivery at a time through
// One when size is 1, else in chunks of size through Many, and returns the
// decision of every delivery, in order, as Decision labels them.
func Run(ctx context.Context, sys System, steps []Step, size int) ([]string, error) {
	var out []string
	for _, st := range steps {
		if st.Action != "" {
			if err := sys.Act(ctx, st.Action); err != nil {
				return out, fmt.Errorf("action %s: %w", st.Action, err)
			}
			continue
		}
		for take := st.Take; len(take) > 0; {
			n := min(size, len(take))
			if size == 1 {
				out = append(out, Decision(sys.One(ctx, take[0])))
			} else {
				for _, d := range sys.Many(ctx, take[:n]) {
					out = append(out, Decision(d))
				}
			}
			take = take[n:]
		}
	}
	return out, nil
}

// Decision labels a decision by what the broker is told: ack, retry later
// or abandon. (The delay of a retry has jitter; its reason is in the
// dead letters when it comes to that.)
func Decision(d rabbit.Decision) string {
	switch {
	case d == rabbit.Ack():
		return "ack"
	case d.Abandoned():
		return "abandon"
	default:
		return "retry"
	}
}

// RowsWithMechanisms reads queries (Rows) and, by the names "inbox",
// "outbox" and "dead letters", the rows the chapter's mechanisms write in a
// consumer's transaction (without times and generated ids): what every
// differential test compares besides its service's own tables. The outbox
// is read through pkg/outbox, its table's one owner.
func RowsWithMechanisms(ctx context.Context, db *sqlx.DB, queries map[string]string) (map[string][]string, error) {
	all := map[string]string{
		"inbox":        `SELECT consumer_name, event_id, payload_sha256 FROM consumer_inbox ORDER BY event_id`,
		"dead letters": `SELECT event_id, event_type, reason, attempts FROM dead_letters ORDER BY event_id`,
	}
	maps.Copy(all, queries)
	out, err := Rows(ctx, db, all)
	if err != nil {
		return nil, err
	}
	out["outbox"], err = outboxLines(ctx, db)
	return out, err
}

// outboxLines are the outbox's events as lines, in aggregate, version and
// type order (event ids and times differ between two runs by nature).
func outboxLines(ctx context.Context, db *sqlx.DB) ([]string, error) {
	rows, err := outbox.List(ctx, db, outbox.Filter{Limit: 100_000})
	if err != nil {
		return nil, err
	}
	lines := make([]string, len(rows))
	for i, r := range rows {
		lines[i] = fmt.Sprintf("%d|%d|%s|%s", r.AggregateID, r.AggregateVersion, r.EventType, r.Payload)
	}
	slices.Sort(lines) // the aggregate id leads: equal rows sort the same in both runs
	return lines, nil
}

// Rows reads the result of each query (explicit columns, a full ORDER BY,
// no column that differs between two runs by nature: times, generated ids)
// as lines of text, by name.
func Rows(ctx context.Context, db *sqlx.DB, queries map[string]string) (map[string][]string, error) {
	out := make(map[string][]string, len(queries))
	for name, q := range queries {
		out[name] = []string{} // a table with no rows is compared too
		rows, err := db.QueryxContext(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for rows.Next() {
			vals, err := rows.SliceScan()
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			parts := make([]string, len(vals))
			for i, v := range vals {
				if b, ok := v.([]byte); ok {
					v = string(b)
				}
				parts[i] = fmt.Sprint(v)
			}
			out[name] = append(out[name], strings.Join(parts, " | "))
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Diff says where two readings of Rows differ, table by table; "" when
// they are the same.
func Diff(one, many map[string][]string) string {
	var b strings.Builder
	names := make([]string, 0, len(one))
	for _, m := range []map[string][]string{one, many} {
		for name := range m {
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if slices.Equal(one[name], many[name]) {
			continue
		}
		fmt.Fprintf(&b, "%s:\n  one at a time:\n    %s\n  in batches:\n    %s\n", name,
			strings.Join(one[name], "\n    "), strings.Join(many[name], "\n    "))
	}
	return b.String()
}

// Sizes draws the batch size of a run: the default (16), or one drawn from
// 2 to 8, which cuts the same takes at other places.
func Sizes(t *rapid.T) int {
	return rapid.OneOf(rapid.Just(16), rapid.IntRange(2, 8)).Draw(t, "batch size")
}

// Item is one thing in an aggregate's history as a test draws it: an
// event, or an action between events (the lease runs out, a cancel
// arrives over HTTP).
type Item struct {
	Event  events.Envelope
	Action string // set: an action, not an event
}

// Events makes items of events.
func Events(es ...events.Envelope) []Item {
	out := make([]Item, len(es))
	for i, e := range es {
		out[i] = Item{Event: e}
	}
	return out
}

// Arrival draws the order in which the items of several aggregates
// happen: mostly each aggregate's in its own order, interleaved with the
// others' (what a broker does), sometimes any order at all (a retry or a
// redrive overtakes).
func Arrival(t *rapid.T, perAggregate [][]Item) []Item {
	var all []Item
	for _, is := range perAggregate {
		all = append(all, is...)
	}
	if rapid.IntRange(0, 4).Draw(t, "any order") == 0 {
		return rapid.Permutation(all).Draw(t, "arrival order")
	}
	next := make([]int, len(perAggregate))
	out := make([]Item, 0, len(all))
	for len(out) < len(all) {
		var open []int
		for i, is := range perAggregate {
			if next[i] < len(is) {
				open = append(open, i)
			}
		}
		i := rapid.SampledFrom(open).Draw(t, "next aggregate")
		out = append(out, perAggregate[i][next[i]])
		next[i]++
	}
	return out
}

// Variant is what can happen to a delivery on its way: it arrives as it
// is, twice side by side (a copy after a lost confirm), redelivered by the
// broker (a lost ack), or as a later attempt from a retry queue.
type Variant int

// The variants.
const (
	AsIs Variant = iota
	Copied
	Redelivered
	Retried
)

// Steps turns items into the steps of a run on queue: each event a
// delivery drawn as one of the variants, with poison now and then (a
// message that is not an event, an event of a type the consumer does not
// take), cut into takes; actions stay between them. What a worker holds
// at once is whatever had arrived, so any cut can happen; under load it
// is everything waiting (half the takes here). An action ends a take.
func Steps(t *rapid.T, queue string, items []Item) []Step {
	var steps []Step
	var waiting []rabbit.Delivery
	cut := func() {
		for len(waiting) > 0 {
			n := len(waiting)
			if rapid.Bool().Draw(t, "take a part") {
				n = rapid.IntRange(1, len(waiting)).Draw(t, "take")
			}
			steps = append(steps, Step{Take: waiting[:n]})
			waiting = waiting[n:]
		}
	}
	for i, it := range items {
		if it.Action != "" {
			cut()
			steps = append(steps, Step{Action: it.Action})
			continue
		}
		d := inboxtest.Delivery(queue, it.Event)
		switch Variant(rapid.IntRange(0, 6).Draw(t, fmt.Sprintf("variant %d", i))) { // AsIs most often
		case Copied:
			waiting = append(waiting, d)
		case Redelivered:
			d.Redelivered = true
		case Retried:
			d.Attempt = 2
		}
		waiting = append(waiting, d)
		if rapid.IntRange(0, 15).Draw(t, fmt.Sprintf("poison after %d", i)) == 0 {
			waiting = append(waiting, poison(t, queue, i))
		}
	}
	cut()
	return steps
}

// poison is a message no consumer can apply.
func poison(t *rapid.T, queue string, i int) rabbit.Delivery {
	e := inboxtest.Event(events.OrderCreated)
	e.EventID = uuid.NewSHA1(uuid.NameSpaceOID, []byte(fmt.Sprint("poison", i))).String()
	d := inboxtest.Delivery(queue, e)
	if rapid.Bool().Draw(t, fmt.Sprintf("poison %d without id", i)) {
		d.MessageId = fmt.Sprint("not-an-id-", i)
	} else {
		d.Type = "no.such-event"
	}
	return d
}

// Main is a differential test package's TestMain: it runs the package's
// tests with rapid making n checks of each property unless the command
// line says otherwise (-rapid.checks): enough for the suite to catch a
// regression in seconds; run more by hand when changing the batch layer.
func Main(m *testing.M, n int) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if !set {
		_ = flag.Set("rapid.checks", fmt.Sprint(n))
	}
	os.Exit(m.Run())
}

// WantBatches fails t unless the batch layer, whose metrics are on reg,
// committed batches of several events during the checks: a differential
// test whose batches all fell back would compare the chapter's path with
// itself. It logs how many batches committed and fell back.
func WantBatches(t *testing.T, reg *prometheus.Registry, consumer string) {
	t.Helper()
	batches := inboxtest.Counter(t, reg, "consumer_batches_total", consumer)
	events := inboxtest.Counter(t, reg, "consumer_batched_events_total", consumer)
	fallbacks := inboxtest.Counter(t, reg, "consumer_batch_fallbacks_total", consumer)
	t.Logf("batches committed: %v (%v events), rolled back and run one at a time: %v", batches, events, fallbacks)
	if batches == 0 {
		t.Fatal("no batch committed: the checks compared nothing but the one-at-a-time path")
	}
}
