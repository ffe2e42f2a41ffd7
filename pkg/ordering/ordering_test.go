package ordering_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/pkg/ordering"
)

var quiet = slog.New(slog.DiscardHandler)

// No event of the saga is a delta today; these types exercise the
// mechanism. They come from two producers ("test" and "other"), each
// numbering its own aggregate's versions, as order, inventory and payment
// do for one order id.
const (
	deltaType      = "test.counter-delta"
	otherDeltaType = "other.counter-delta"
)

func init() {
	events.Register(deltaType, []int{1}, events.Delta)
	events.Register(otherDeltaType, []int{1}, events.Delta)
}

// deltaConsumer appends each applied version to a string, so the order of
// application is visible.
func deltaConsumer(t *testing.T, deadline time.Duration) (*inbox.Consumer, *sqldbtest.DB) {
	t.Helper()
	db := inboxtest.DB(t)
	db.MustExec(`CREATE TABLE applied (id INT PRIMARY KEY, seq VARCHAR(100) NOT NULL)`)
	db.MustExec(`INSERT INTO applied VALUES (1, '')`)
	apply := func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
		label := fmt.Sprint(e.AggregateVersion)
		if e.Type == otherDeltaType {
			label = "o" + label
		}
		_, err := tx.ExecContext(ctx, `UPDATE applied SET seq = CONCAT(seq, ?) WHERE id = 1`, label)
		return err
	}
	c := inbox.NewConsumer(inbox.Config{Name: "projector", DB: db.DB, Log: quiet, ParkDeadline: deadline,
		Handlers: map[events.Type]inbox.Handler{deltaType: apply, otherDeltaType: apply}})
	return c, db
}

func delta(version uint64) events.Envelope {
	return events.Envelope{EventID: uuid.NewString(), Type: deltaType, AggregateID: 42, AggregateVersion: version,
		SchemaVersion: 1, Payload: []byte(fmt.Sprintf(`{"add":%d}`, version))}
}

func appliedSeq(t *testing.T, db *sqlx.DB) string {
	t.Helper()
	var s string
	if err := db.Get(&s, `SELECT seq FROM applied WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	return s
}

// Versions 2 and 3 arrive before 1: they wait in parked_events (not in the
// inbox: they are not done), a redelivery of a parked one is a duplicate,
// and when 1 arrives all three apply, in order, in one transaction.
func TestDeltaEventsWaitForTheirGapThenApplyInOrder(t *testing.T) {
	t.Parallel()
	c, db := deltaConsumer(t, time.Minute)
	ctx := context.Background()
	v1, v2, v3 := delta(1), delta(2), delta(3)
	for _, e := range []events.Envelope{v2, v3} {
		if err := c.Process(ctx, e); !errors.Is(err, ordering.ErrParked) {
			t.Fatalf("v%d ahead of the gap: err = %v, want ErrParked", e.AggregateVersion, err)
		}
	}
	if err := c.Process(ctx, v2); !errors.Is(err, inbox.ErrAlreadyProcessed) {
		t.Fatalf("redelivery of parked v2: err = %v, want ErrAlreadyProcessed", err)
	}
	if got := appliedSeq(t, db.DB); got != "" {
		t.Fatalf("applied %q before the gap filled, want nothing", got)
	}
	var inboxRows, parked int
	db.Get(&inboxRows, `SELECT COUNT(*) FROM consumer_inbox`)
	db.Get(&parked, `SELECT COUNT(*) FROM parked_events WHERE applied_at IS NULL AND expected_version = 1`)
	if inboxRows != 0 || parked != 2 {
		t.Fatalf("inbox rows %d, parked %d; want 0 and 2 waiting for version 1", inboxRows, parked)
	}

	if err := c.Process(ctx, v1); err != nil {
		t.Fatalf("v1: %v", err)
	}
	if got := appliedSeq(t, db.DB); got != "123" {
		t.Fatalf("applied %q, want 123 (in version order)", got)
	}
	db.Get(&inboxRows, `SELECT COUNT(*) FROM consumer_inbox`)
	db.Get(&parked, `SELECT COUNT(*) FROM parked_events WHERE applied_at IS NULL`)
	var last uint64
	db.Get(&last, `SELECT last_version FROM inbox_sequences WHERE consumer_name = 'projector' AND aggregate_id = 42`)
	if inboxRows != 3 || parked != 0 || last != 3 {
		t.Fatalf("inbox rows %d, still parked %d, last version %d; want 3, 0, 3", inboxRows, parked, last)
	}
	// Late copies change nothing: the same event is a duplicate, another id
	// for an applied version is stale.
	if err := c.Process(ctx, v2); !errors.Is(err, inbox.ErrAlreadyProcessed) {
		t.Fatalf("v2 again: %v, want ErrAlreadyProcessed", err)
	}
	if err := c.Process(ctx, delta(2)); err != nil {
		t.Fatalf("stale v2 under another id: %v", err)
	}
	if err := c.Process(ctx, delta(4)); err != nil {
		t.Fatalf("v4: %v", err)
	}
	if got := appliedSeq(t, db.DB); got != "1234" {
		t.Fatalf("applied %q, want 1234", got)
	}
}

// Two producers number their own aggregates' versions and share the
// aggregate id (order, inventory and payment all use the order id): each
// keeps its own sequence. One type's version is neither stale because the
// other's is higher, nor the successor that unparks the other's.
func TestSequencesAreKeptPerAggregateType(t *testing.T) {
	t.Parallel()
	c, db := deltaConsumer(t, time.Minute)
	ctx := context.Background()
	other := func(version uint64) events.Envelope {
		e := delta(version)
		e.Type = otherDeltaType
		return e
	}
	steps := []struct {
		e    events.Envelope
		want error
		seq  string // applied so far: "o" marks the other producer's versions
	}{
		{delta(1), nil, "1"},
		{other(3), ordering.ErrParked, "1"}, // waits for the other producer's 1 and 2
		{delta(2), nil, "12"},               // its successor 3 is not the other producer's 3
		{other(1), nil, "12o1"},             // not stale: the test producer's 2 says nothing about it
		{other(2), nil, "12o1o2o3"},         // fills the gap: the parked 3 applies
		{delta(3), nil, "12o1o2o33"},
	}
	for i, s := range steps {
		if err := c.Process(ctx, s.e); !errors.Is(err, s.want) {
			t.Fatalf("step %d (%s v%d): err = %v, want %v", i, s.e.Type, s.e.AggregateVersion, err, s.want)
		}
		if got := appliedSeq(t, db.DB); got != s.seq {
			t.Fatalf("step %d (%s v%d): applied %q, want %q", i, s.e.Type, s.e.AggregateVersion, got, s.seq)
		}
	}
	var seqs []string
	db.Select(&seqs, `SELECT CONCAT(aggregate_type, ':', last_version) FROM inbox_sequences WHERE aggregate_id = 42 ORDER BY 1`)
	if fmt.Sprint(seqs) != "[other:3 test:3]" {
		t.Fatalf("sequences of aggregate 42 = %v, want [other:3 test:3]", seqs)
	}
}

// No event of the saga carries a full state; this snapshot type exercises
// the mechanism: its handler overwrites the state with the version it
// carries.
const snapshotType = "test.counter-snapshot"

func init() { events.Register(snapshotType, []int{1}, events.Snapshot) }

func snapshot(version uint64) events.Envelope {
	e := delta(version)
	e.Type = snapshotType
	return e
}

// Snapshots apply only when newer than the version applied: an older one
// (or another copy of the same version) arriving late is acknowledged,
// recorded in the inbox, counted and logged, and changes nothing; gaps do
// not matter (a snapshot needs no predecessor).
func TestSnapshotsApplyOnlyNewerVersions(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	db.MustExec(`CREATE TABLE applied (id INT PRIMARY KEY, seq VARCHAR(100) NOT NULL)`)
	db.MustExec(`INSERT INTO applied VALUES (1, '')`)
	var logs strings.Builder
	reg := prometheus.NewRegistry()
	c := inbox.NewConsumer(inbox.Config{Name: "projector", DB: db.DB, Log: quietTo(&logs), Metrics: inbox.NewMetrics(reg),
		Handlers: map[events.Type]inbox.Handler{snapshotType: func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
			_, err := tx.ExecContext(ctx, `UPDATE applied SET seq = ? WHERE id = 1`, fmt.Sprint(e.AggregateVersion))
			return err
		}}})
	ctx := context.Background()
	v3 := snapshot(3)
	steps := []struct {
		e     events.Envelope
		want  error
		state string
		stale float64
	}{
		{snapshot(2), nil, "2", 0},
		{snapshot(1), nil, "2", 1}, // late and older: acknowledged, not applied
		{v3, nil, "3", 1},
		{v3, inbox.ErrAlreadyProcessed, "3", 1}, // a redelivery is a duplicate, not stale
		{snapshot(3), nil, "3", 2},              // the same version under another id: not newer
		{snapshot(7), nil, "7", 2},              // no gap to wait for
	}
	for i, s := range steps {
		if err := c.Process(ctx, s.e); !errors.Is(err, s.want) {
			t.Fatalf("step %d (v%d): err = %v, want %v", i, s.e.AggregateVersion, err, s.want)
		}
		if got := appliedSeq(t, db.DB); got != s.state {
			t.Fatalf("step %d (v%d): state %q, want %q", i, s.e.AggregateVersion, got, s.state)
		}
		if got := inboxtest.Counter(t, reg, "consumer_stale_events_total", "projector"); got != s.stale {
			t.Fatalf("step %d (v%d): consumer_stale_events_total = %v, want %v", i, s.e.AggregateVersion, got, s.stale)
		}
	}
	if n := inboxtest.InboxRows(t, db.DB, steps[1].e.EventID); n != 1 {
		t.Fatalf("inbox rows of the stale v1 = %d, want 1 (done, not applied)", n)
	}
	if !strings.Contains(logs.String(), "not newer than the version applied") || !strings.Contains(logs.String(), steps[1].e.EventID) {
		t.Fatalf("no log line for the stale v1 (%s): %q", steps[1].e.EventID, logs.String())
	}
}

// A gap that never fills: at the deadline the parked event is alerted on
// once, counted as overdue, and kept as the recovery record; when the
// missing version is finally redriven, the parked event applies.
func TestOverdueParkedDeltaIsAlertedAndKept(t *testing.T) {
	t.Parallel()
	c, db := deltaConsumer(t, time.Millisecond)
	ctx := context.Background()
	v2 := delta(2)
	if err := c.Process(ctx, v2); !errors.Is(err, ordering.ErrParked) {
		t.Fatalf("v2: %v, want ErrParked", err)
	}
	inboxtest.WaitFor(t, "the deadline to pass in database time", func() bool {
		var past bool
		db.Get(&past, `SELECT deadline_at < NOW(6) FROM parked_events WHERE event_id = ?`, v2.EventID)
		return past
	})
	var logs strings.Builder
	n, err := ordering.OverdueParked(ctx, db.DB, quietTo(&logs))
	if err != nil || n != 1 {
		t.Fatalf("OverdueParked = %d, %v; want 1", n, err)
	}
	if !strings.Contains(logs.String(), "ALERT") || !strings.Contains(logs.String(), v2.EventID) {
		t.Fatalf("no alert logged for %s: %q", v2.EventID, logs.String())
	}
	if n, _ := ordering.OverdueParked(ctx, db.DB, quiet); n != 0 {
		t.Fatalf("second check alerted %d again, want 0", n)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(ordering.ParkedCollector(db.DB, quiet))
	if got := parkedGauge(t, reg, "overdue"); got != 1 {
		t.Fatalf("consumer_parked_events{state=overdue} = %g, want 1", got)
	}
	// Recovery: the missing v1 arrives (redriven from the producer).
	if err := c.Process(ctx, delta(1)); err != nil {
		t.Fatal(err)
	}
	if got := appliedSeq(t, db.DB); got != "12" {
		t.Fatalf("applied %q after the recovery, want 12", got)
	}
	var alerted, applied bool
	db.Get(&alerted, `SELECT alerted_at IS NOT NULL FROM parked_events WHERE event_id = ?`, v2.EventID)
	db.Get(&applied, `SELECT applied_at IS NOT NULL FROM parked_events WHERE event_id = ?`, v2.EventID)
	if !alerted || !applied {
		t.Fatalf("recovery record: alerted %v, applied %v; want both", alerted, applied)
	}
}

func quietTo(w *strings.Builder) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// Two instances (here eight sweepers, each on its own connection pool,
// released together) check the same overdue parked events: each event is
// alerted on once in all, by the sweeper whose compare-and-set won.
func TestOverdueParkedDeltaIsAlertedOnceByRacingSweepers(t *testing.T) {
	t.Parallel()
	c, db := deltaConsumer(t, time.Millisecond)
	ctx := context.Background()
	const parked, sweepers = 20, 8
	for i := range parked {
		e := delta(2)
		e.AggregateID = uint64(100 + i)
		if err := c.Process(ctx, e); !errors.Is(err, ordering.ErrParked) {
			t.Fatalf("parking %d: %v, want ErrParked", i, err)
		}
	}
	inboxtest.WaitFor(t, "every deadline to pass in database time", func() bool {
		var due int
		db.Get(&due, `SELECT COUNT(*) FROM parked_events WHERE deadline_at < NOW(6)`)
		return due == parked
	})
	var alerts atomic.Int32
	counted := slog.New(countAlerts{&alerts})
	found := make([]int, sweepers)
	pools := make([]*sqlx.DB, sweepers)
	for i := range sweepers {
		pool, err := sqldb.Open(ctx, sqldb.Config{DSN: db.DSN, MaxOpenConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pool.Close() })
		pools[i] = pool
	}
	testutil.Together(sweepers, func(i int) {
		n, err := ordering.OverdueParked(ctx, pools[i], counted)
		if err != nil {
			t.Error(err)
		}
		found[i] = n
	})
	total := 0
	for _, n := range found {
		total += n
	}
	t.Logf("alerts per sweeper: %v", found)
	if total != parked || alerts.Load() != parked {
		t.Fatalf("%d alerts reported, %d ALERT log lines, for %d overdue events; want one each (found per sweeper: %v)",
			total, alerts.Load(), parked, found)
	}
}

// countAlerts counts the ALERT records logged through it.
type countAlerts struct{ n *atomic.Int32 }

func (h countAlerts) Enabled(context.Context, slog.Level) bool { return true }
func (h countAlerts) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "ALERT") {
		h.n.Add(1)
	}
	return nil
}
func (h countAlerts) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countAlerts) WithGroup(string) slog.Handler      { return h }

// parkedGauge reads consumer_parked_events{state} from reg.
func parkedGauge(t *testing.T, reg *prometheus.Registry, state string) float64 {
	t.Helper()
	return testutil.MustMetric(t, reg, "consumer_parked_events", "state", state)
}
