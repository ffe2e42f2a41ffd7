package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/internal/benchtest"
	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

// BenchmarkOutboxDrain drains a backlog of b.N committed events (run it
// with -benchtime 20000x) with W claim-publish-mark loops, exactly the loop
// a Dispatcher worker runs (DispatchOnce until a claim comes back empty),
// each with its own channel. In the same run it publishes the same number
// of messages of the same shape straight to the broker with W
// rabbit.Publishers in batches of the same size: the ceiling.
func BenchmarkOutboxDrain(b *testing.B) {
	cases := []struct{ workers, batch int }{
		{1, 100}, {2, 100}, {4, 100}, {1, 500}, {2, 500}, {4, 500},
	}
	for _, c := range cases {
		b.Run(fmt.Sprintf("dispatchers=%d/batch=%d", c.workers, c.batch), func(b *testing.B) {
			b.StopTimer()
			f := newFixture(b, "order", events.OrderCreated)
			n := b.N

			rawCPU := benchtest.StartCPU()
			raw := publishAll(b, f.conn, messages(f.ns.Exchange(), n), c.workers, c.batch)
			rawCPU.Report(b, "ceiling_")
			f.purge(b)

			benchtest.Prefill(b, f.db.DB, 0, n)
			d := outbox.New(f.db.DB, outbox.Config{Exchange: f.ns.Exchange(), Workers: c.workers,
				BatchSize: c.batch, Log: quiet, NewPublisher: outbox.RabbitPublishers(f.conn)})
			cpu := benchtest.StartCPU()
			b.StartTimer()
			took := drain(b, d, c.workers, func() outbox.Publisher { return f.conn.NewPublisher() })
			b.StopTimer()
			cpu.Report(b, "")
			if sent := countStatus(b, f.db.DB, "sent"); sent != n {
				b.Fatalf("sent rows = %d, want %d", sent, n)
			}
			if depth := f.queueDepth(b); depth != n {
				b.Fatalf("queue depth = %d, want %d", depth, n)
			}
			b.ReportMetric(float64(n)/took.Seconds(), "events/s")
			b.ReportMetric(float64(n)/raw.Seconds(), "ceiling_events/s")
			b.ReportMetric(100*raw.Seconds()/took.Seconds(), "pct_of_ceiling")

			// The database side alone: the same claim and mark with a
			// broker that confirms at once. No dispatcher that keeps the
			// chapter's two writes per event can drain faster than this.
			benchtest.Prefill(b, f.db.DB, 0, n)
			dbCPU := benchtest.StartCPU()
			dbOnly := drain(b, d, c.workers, func() outbox.Publisher { return ackAll{} })
			dbCPU.Report(b, "dbonly_")
			b.ReportMetric(float64(n)/dbOnly.Seconds(), "dbonly_events/s")
			b.ReportMetric(100*raw.Seconds()/dbOnly.Seconds(), "dbonly_pct_of_ceiling")
		})
	}
}

// drain runs workers DispatchOnce loops, each with its own publisher, until
// a claim comes back empty, and returns how long it took.
func drain(b *testing.B, d *outbox.Dispatcher, workers int, newPub func() outbox.Publisher) time.Duration {
	b.Helper()
	pubs := make([]outbox.Publisher, workers)
	for i := range pubs {
		pubs[i] = newPub()
		defer pubs[i].Close()
	}
	return benchtest.Drain(b, d, pubs)
}

// BenchmarkRawPublish is the broker alone: b.N persistent, mandatory
// messages to one quorum queue (-benchtime 20000x), with rabbit.Publisher
// batches (publish all, then await all confirms) at several sizes and
// parallelism, and with a sliding window that never waits for a whole
// batch (confirms pipelined across batches): how much the batch barrier
// costs.
func BenchmarkRawPublish(b *testing.B) {
	for _, c := range []struct{ publishers, batch int }{{1, 100}, {1, 200}, {1, 500}, {2, 100}, {4, 100}, {2, 500}} {
		b.Run(fmt.Sprintf("publishers=%d/batch=%d", c.publishers, c.batch), func(b *testing.B) {
			b.StopTimer()
			f := newFixture(b, "order", events.OrderCreated)
			msgs := messages(f.ns.Exchange(), b.N)
			cpu := benchtest.StartCPU()
			b.StartTimer()
			took := publishAll(b, f.conn, msgs, c.publishers, c.batch)
			b.StopTimer()
			cpu.Report(b, "")
			b.ReportMetric(float64(b.N)/took.Seconds(), "msgs/s")
		})
	}
	for _, window := range []int{100, 500, 2000} {
		b.Run(fmt.Sprintf("window=%d", window), func(b *testing.B) {
			b.StopTimer()
			f := newFixture(b, "order", events.OrderCreated)
			msgs := messages(f.ns.Exchange(), b.N)
			cpu := benchtest.StartCPU()
			b.StartTimer()
			took := publishWindow(b, f.conn, msgs, window)
			b.StopTimer()
			cpu.Report(b, "")
			b.ReportMetric(float64(b.N)/took.Seconds(), "msgs/s")
		})
	}
}

// publishWindow keeps up to window messages unconfirmed on one channel:
// each new publish waits only for the confirm of the message window places
// earlier, never for a whole batch.
func publishWindow(b *testing.B, conn *rabbit.Conn, msgs []rabbit.Message, window int) time.Duration {
	b.Helper()
	ctx := context.Background()
	ch, err := conn.Channel(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	fifo := make([]*amqp.DeferredConfirmation, 0, len(msgs))
	head := 0
	wait := func() {
		dc := fifo[head]
		head++
		<-dc.Done()
		if !dc.Acked() {
			b.Fatalf("nacked")
		}
	}
	start := time.Now()
	for _, m := range msgs {
		if len(fifo)-head >= window {
			wait()
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, m.Exchange, m.RoutingKey, true, false, m.Publishing)
		if err != nil {
			b.Fatal(err)
		}
		fifo = append(fifo, dc)
	}
	for head < len(fifo) {
		wait()
	}
	return time.Since(start)
}

// BenchmarkCommitToPublish commits one outbox event at a time at a steady
// rate (BENCH_RATE, default 100/s, for BENCH_SECONDS, default 10) and
// measures commit -> delivery to a consumer of the bound queue, with a
// dispatcher configured as in the services (2 workers, batch 100, poll
// 1 s). "wake" calls Dispatcher.Wake after each commit, as the services
// do; "poll-only" does not, so only the fallback poll finds the events.
// The ceiling is the broker alone at the same rate: publish one message
// (confirmed) -> delivery. Run with -benchtime 1x.
func BenchmarkCommitToPublish(b *testing.B) {
	rate := benchtest.EnvInt("BENCH_RATE", 100)
	secs := benchtest.EnvInt("BENCH_SECONDS", 10)
	for _, wake := range []bool{true, false} {
		name := "wake"
		if !wake {
			name = "poll-only"
		}
		b.Run(name, func(b *testing.B) {
			b.StopTimer()
			f := newFixture(b, "order", events.OrderCreated)
			recv := newReceiver(b, f.queue)
			total := rate * secs

			// Ceiling: straight to the broker, one confirmed message per tick.
			pub := f.conn.NewPublisher()
			defer pub.Close()
			sentAt := map[string]time.Time{}
			msgs := messages(f.ns.Exchange(), total)
			tick(total, rate, func(i int) {
				t := time.Now()
				if err := pub.Publish(context.Background(), msgs[i:i+1], 5*time.Second)[0]; err != nil {
					b.Fatalf("raw publish: %v", err)
				}
				sentAt[msgs[i].Publishing.MessageId] = t
			})
			raw := recv.latencies(b, sentAt, 5*time.Second)

			d := outbox.New(f.db.DB, outbox.Config{Exchange: f.ns.Exchange(), Workers: 2, BatchSize: 100,
				Log: quiet, NewPublisher: outbox.RabbitPublishers(f.conn)})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = d.Run(ctx) }()
			defer func() { cancel(); <-done }()
			time.Sleep(200 * time.Millisecond) // the workers' first (empty) claims

			committedAt := map[string]time.Time{}
			var commits []time.Duration
			cpu := benchtest.StartCPU()
			b.StartTimer()
			tick(total, rate, func(i int) {
				var ids []string
				t0 := time.Now()
				err := sqldb.WithTx(context.Background(), f.db.DB, func(tx *sqlx.Tx) error {
					var err error
					ids, err = outbox.Add(context.Background(), tx, outbox.Event{AggregateID: uint64(i + 1),
						AggregateVersion: 1, Type: events.OrderCreated, Payload: benchtest.OrderCreated(uint64(i + 1))})
					return err
				})
				if err != nil {
					b.Fatalf("commit: %v", err)
				}
				t := time.Now()
				commits = append(commits, t.Sub(t0))
				committedAt[ids[0]] = t
				if wake {
					d.Wake()
				}
			})
			lat := recv.latencies(b, committedAt, 5*time.Second)
			b.StopTimer()
			cpu.Report(b, "")
			reportLatency(b, "", lat)
			reportLatency(b, "raw_", raw)
			reportLatency(b, "commit_", commits)
		})
	}
}

// tick calls fn(i) for i in [0, total) at start + i/rate, open loop.
func tick(total, rate int, fn func(i int)) {
	start := time.Now()
	for i := range total {
		if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > 0 {
			time.Sleep(d)
		}
		fn(i)
	}
}

// receiver consumes a queue (no-ack, prefetch 1000) and records when each
// message_id arrived.
type receiver struct {
	mu  sync.Mutex
	got map[string]time.Time
}

func newReceiver(b *testing.B, queue string) *receiver {
	b.Helper()
	conn := rabbittest.Dial(b)
	b.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.Qos(1000, 0, false); err != nil {
		b.Fatal(err)
	}
	ds, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	r := &receiver{got: map[string]time.Time{}}
	go func() {
		for d := range ds {
			t := time.Now()
			r.mu.Lock()
			r.got[d.MessageId] = t
			r.mu.Unlock()
		}
	}()
	return r
}

// latencies waits (up to wait after the last send) for every message of
// sent and returns arrival - sent for each.
func (r *receiver) latencies(b *testing.B, sent map[string]time.Time, wait time.Duration) []time.Duration {
	b.Helper()
	testutil.WaitFor(b, wait, fmt.Sprintf("all %d messages to arrive", len(sent)), func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for id := range sent {
			if _, ok := r.got[id]; !ok {
				return false
			}
		}
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]time.Duration, 0, len(sent))
	for id, t := range sent {
		out = append(out, r.got[id].Sub(t))
	}
	return out
}

// ackAll is a Publisher whose broker confirms everything at once: it
// leaves DispatchOnce with the database work alone (claim, mark). It notes
// when it was called, so a caller can split a DispatchOnce into claim
// (start to publish) and mark (publish to end).
type ackAll struct{ at *time.Time }

func (a ackAll) Publish(_ context.Context, msgs []rabbit.Message, _ time.Duration) []error {
	if a.at != nil {
		*a.at = time.Now()
	}
	return make([]error, len(msgs))
}
func (ackAll) Close() {}

// BenchmarkClaim times DispatchOnce against the database alone (a
// publisher that confirms at once): due=0 is the claim transaction that
// finds nothing (what a woken worker pays when another took the rows),
// due=100 claims and marks 100 fresh rows, poll is the fallback poller's
// EXISTS query. sent=0 runs on a fresh table. With BENCH_BIG=1, sent=N runs
// on a table filled first with BENCH_SENT_ROWS (default 1,000,000) rows
// already 'sent' (about a minute), and each of its figures is compared
// with the same operations, in the same run, on a fresh table without sent
// rows (empty_us/op, ratio). after-churn is due=0 on a table where 20,000
// events were just claimed and marked: the secondary index still holds
// their delete-marked entries until InnoDB's purge removes them.
func BenchmarkClaim(b *testing.B) {
	ops := []string{"due=0", "poll", "due=100"}
	var big *sqldbtest.DB
	var fill time.Duration
	var plan string
	sent := 0
	if os.Getenv("BENCH_BIG") == "1" {
		sent = benchtest.EnvInt("BENCH_SENT_ROWS", 1_000_000)
		big = sqldbtest.New(b, "order")
		start := time.Now()
		fillSent(b, big.DB, sent)
		fill = time.Since(start)
		plan = explainClaim(b, big.DB)
	}
	for _, op := range ops {
		b.Run("sent=0/"+op, func(b *testing.B) {
			b.StopTimer()
			per := claimOps(b, sqldbtest.New(b, "order").DB, op, b.N, true)
			b.ReportMetric(float64(per.Microseconds())/float64(b.N), "us/op")
		})
	}
	b.Run("sent=0/due=0/after-churn=20000", func(b *testing.B) {
		b.StopTimer()
		db := sqldbtest.New(b, "order").DB
		d := outbox.New(db, outbox.Config{Exchange: "bench", Log: quiet})
		for range 200 {
			addPending(b, db, 100)
			if _, err := d.DispatchOnce(context.Background(), ackAll{}); err != nil {
				b.Fatal(err)
			}
		}
		per := claimOps(b, db, "due=0", b.N, true)
		b.ReportMetric(float64(per.Microseconds())/float64(b.N), "us/op")
	})
	if big == nil {
		return
	}
	for _, op := range ops {
		b.Run(fmt.Sprintf("sent=%d/%s", sent, op), func(b *testing.B) {
			b.Logf("table filled with %d sent rows in %s; %s", sent, fill.Round(time.Millisecond), plan)
			per := claimOps(b, big.DB, op, b.N, true)
			base := claimOps(b, sqldbtest.New(b, "order").DB, op, b.N, false)
			b.ReportMetric(float64(per.Microseconds())/float64(b.N), "us/op")
			b.ReportMetric(float64(base.Microseconds())/float64(b.N), "empty_us/op")
			b.ReportMetric(float64(per)/float64(base), "ratio")
		})
	}
}

// claimOps runs n operations of one kind on db and returns the time spent
// in them (setup excluded). With timed, the benchmark timer follows.
func claimOps(b *testing.B, db *sqlx.DB, op string, n int, timed bool) time.Duration {
	b.Helper()
	ctx := context.Background()
	d := outbox.New(db, outbox.Config{Exchange: "bench", Log: quiet})
	if timed {
		b.StopTimer()
	}
	var total, claimed time.Duration
	var published time.Time
	pub := ackAll{at: &published}
	for range n {
		if op == "due=100" {
			addPending(b, db, 100)
		}
		if timed {
			b.StartTimer()
		}
		start := time.Now()
		switch op {
		case "poll":
			var due bool
			if err := db.GetContext(ctx, &due, pollQuery); err != nil {
				b.Fatal(err)
			}
		default:
			res, err := d.DispatchOnce(ctx, pub)
			if err != nil {
				b.Fatal(err)
			}
			claimed += published.Sub(start)
			if want := map[string]int{"due=0": 0, "due=100": 100}[op]; res.Sent != want {
				b.Fatalf("%s: sent %d rows, want %d", op, res.Sent, want)
			}
		}
		total += time.Since(start)
		if timed {
			b.StopTimer()
		}
	}
	if op == "due=100" && timed {
		// Split: claim (BEGIN, SELECT ... FOR UPDATE SKIP LOCKED, UPDATE,
		// COMMIT) and mark-sent (one autocommit UPDATE).
		b.ReportMetric(float64(claimed.Microseconds())/float64(n), "claim_us/op")
		b.ReportMetric(float64((total-claimed).Microseconds())/float64(n), "mark_us/op")
	}
	return total
}

// pollQuery is the fallback poller's query (outbox.anyDue in
// pkg/outbox/store.go, repeated here because it is not exported).
const pollQuery = `SELECT EXISTS (
  SELECT 1 FROM outbox_events WHERE status = 'pending' AND next_attempt_at <= NOW(6)
)`

// claimSelect is the claim's locking read (outbox.claim), for EXPLAIN.
const claimSelect = `SELECT event_id, aggregate_id, aggregate_version, event_type, schema_version,
       payload, attempts, created_at
FROM outbox_events
WHERE status = 'pending' AND next_attempt_at <= NOW(6)
ORDER BY next_attempt_at, created_at
LIMIT 100
FOR UPDATE SKIP LOCKED`

func addPending(b *testing.B, db *sqlx.DB, n int) {
	b.Helper()
	evs := make([]outbox.Event, n)
	for i := range evs {
		evs[i] = outbox.Event{AggregateID: uint64(i + 1), AggregateVersion: 1, Type: events.OrderCreated,
			Payload: benchtest.OrderCreated(uint64(i + 1))}
	}
	ctx := context.Background()
	err := sqldb.WithTx(ctx, db, func(tx *sqlx.Tx) error {
		_, err := outbox.Add(ctx, tx, evs...)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}

// fillSent inserts n rows already 'sent', as a year of traffic leaves
// them, 100,000 per statement, from a numbers CTE (0..999 squared), with
// time-ordered ids and timestamps spread over the past n seconds.
func fillSent(b *testing.B, db *sqlx.DB, n int) {
	b.Helper()
	payload := `{"order_id":"1","customer_id":"customer-1","items":[{"sku":"SKU-1","quantity":2,"unit_price_cents":8900},{"sku":"SKU-2","quantity":1,"unit_price_cents":1200}],"total_cents":19000,"currency":"EUR"}`
	const q = `INSERT INTO outbox_events
  (event_id, aggregate_id, aggregate_version, event_type, schema_version, payload,
   status, attempts, next_attempt_at, created_at, sent_at)
WITH RECURSIVE d (n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM d WHERE n < 999)
SELECT CONCAT('00000000-0000-7000-8000-', LPAD(k, 12, '0')), k + 1, 1, 'order.created', 1, ?,
       'sent', 1, ts, ts, ts
FROM (SELECT a.n * 1000 + c.n AS k, TIMESTAMPADD(SECOND, a.n * 1000 + c.n - ?, NOW(6)) AS ts
      FROM d a CROSS JOIN d c WHERE a.n BETWEEN ? AND ?) nums
WHERE k < ?`
	for lo := 0; lo*1000 < n; lo += 100 {
		if _, err := db.Exec(q, payload, n, lo, lo+99, n); err != nil {
			b.Fatalf("fill sent rows: %v", err)
		}
	}
	if _, err := db.Exec(`ANALYZE TABLE outbox_events`); err != nil {
		b.Fatal(err)
	}
	var got int
	if err := db.Get(&got, `SELECT COUNT(*) FROM outbox_events`); err != nil || got != n {
		b.Fatalf("filled %d rows (%v), want %d", got, err, n)
	}
}

func explainClaim(b *testing.B, db *sqlx.DB) string {
	b.Helper()
	rows, err := db.Queryx("EXPLAIN " + claimSelect)
	if err != nil {
		return fmt.Sprintf("explain: %v", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		m := map[string]any{}
		if err := rows.MapScan(m); err != nil {
			return fmt.Sprintf("explain: %v", err)
		}
		for k, v := range m {
			if bs, ok := v.([]byte); ok {
				m[k] = string(bs)
			}
		}
		out = append(out, fmt.Sprintf("EXPLAIN claim: type=%v key=%v rows=%v Extra=%v", m["type"], m["key"], m["rows"], m["Extra"]))
	}
	return strings.Join(out, "; ")
}

// BenchmarkOutboxTableCost is the database side of a drain (one dispatcher,
// batch 500, a broker that confirms at once) on the chapter's outbox table
// and on variants of it, to show what each part of the table costs per
// event: claim (the claim transaction) and mark (the mark-sent UPDATE), in
// µs. Run with -benchtime 20000x. The variants are for measurement only;
// the services keep the chapter's table.
func BenchmarkOutboxTableCost(b *testing.B) {
	variants := []struct{ name, alter string }{
		{"chapter", ""},
		{"without-ix_expired", "ALTER TABLE outbox_events DROP KEY ix_expired"},
		{"payload-without-json-check", "ALTER TABLE outbox_events MODIFY payload LONGTEXT NOT NULL"},
		{"ix_dispatch-without-created_at", "ALTER TABLE outbox_events DROP KEY ix_dispatch, ADD KEY ix_dispatch (status, next_attempt_at)"},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			b.StopTimer()
			db := sqldbtest.New(b, "order").DB
			if v.alter != "" {
				if _, err := db.Exec(v.alter); err != nil {
					b.Fatal(err)
				}
			}
			benchtest.Prefill(b, db, 0, b.N)
			d := outbox.New(db, outbox.Config{Exchange: "bench", BatchSize: 500, Log: quiet})
			var published time.Time
			pub := ackAll{at: &published}
			var claimT, markT time.Duration
			cpu := benchtest.StartCPU()
			b.StartTimer()
			for {
				t0 := time.Now()
				res, err := d.DispatchOnce(context.Background(), pub)
				if err != nil {
					b.Fatal(err)
				}
				if res.Claimed == 0 {
					break
				}
				claimT += published.Sub(t0)
				markT += time.Since(published)
			}
			b.StopTimer()
			cpu.Report(b, "")
			if sent := countStatus(b, db, "sent"); sent != b.N {
				b.Fatalf("sent rows = %d, want %d", sent, b.N)
			}
			b.ReportMetric(float64(claimT.Microseconds())/float64(b.N), "claim_us/event")
			b.ReportMetric(float64(markT.Microseconds())/float64(b.N), "mark_us/event")
			b.ReportMetric(float64((claimT+markT).Microseconds())/float64(b.N), "us/event")
		})
	}
}
