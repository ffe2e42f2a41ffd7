package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/internal/benchtest"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// BenchmarkConsumer consumes b.N OrderCreated messages from a quorum queue
// (-benchtime 10000x) through rabbit.Conn.Consume with an inbox.Consumer:
// per message one transaction with the inbox row, a compare-and-set UPDATE
// of that order's row and one outbox event (effect=full), or the inbox row
// alone (effect=inbox). The ceiling is the same consume loop with a handler
// that acks at once, on the same number of messages, in the same run.
func BenchmarkConsumer(b *testing.B) {
	cases := []struct {
		workers, prefetch int
		effect            string
	}{
		{16, 64, "full"}, // the services' defaults
		{16, 64, "inbox"},
		{4, 64, "full"},
		{8, 64, "full"},
		{32, 64, "full"},
		{32, 256, "full"},
		{64, 256, "full"},
		{16, 16, "full"},
	}
	for _, c := range cases {
		b.Run(fmt.Sprintf("workers=%d/prefetch=%d/effect=%s", c.workers, c.prefetch, c.effect), func(b *testing.B) {
			b.StopTimer()
			f := newFixture(b, "order", events.OrderCreated)
			n := b.N
			fillBenchOrders(b, f.db, n)
			cfg := rabbit.ConsumeConfig{Queue: f.queue, Workers: c.workers, Prefetch: c.prefetch, Log: quiet}

			// Ceiling: consume and ack, nothing else.
			publishAll(b, f.conn, messages(f.ns.Exchange(), n), 1, 500)
			var acked atomic.Int64
			rawCPU := benchtest.StartCPU()
			raw := consumeN(b, f.conn, cfg, n, func(ctx context.Context, d rabbit.Delivery) rabbit.Decision {
				acked.Add(1)
				return rabbit.Ack()
			}, &acked)
			rawCPU.Report(b, "ceiling_")

			// The inbox consumer on a fresh set of messages (new event ids).
			publishAll(b, f.conn, messages(f.ns.Exchange(), n), 1, 500)
			var committed atomic.Int64
			handler := reserve
			if c.effect == "inbox" {
				handler = func(context.Context, *sqlx.Tx, events.Envelope) error { return nil }
			}
			con := inbox.NewConsumer(inbox.Config{Name: "bench", DB: f.db.DB, Log: quiet,
				Handlers:    map[events.Type]inbox.Handler{events.OrderCreated: handler},
				AfterCommit: func() { committed.Add(1) }})
			cpu := benchtest.StartCPU()
			b.StartTimer()
			var handled atomic.Int64
			took := consumeN(b, f.conn, cfg, n, func(ctx context.Context, d rabbit.Delivery) rabbit.Decision {
				handled.Add(1)
				return con.Handle(ctx, d)
			}, &committed)
			b.StopTimer()
			cpu.Report(b, "")

			var rows int
			if err := f.db.Get(&rows, `SELECT COUNT(*) FROM consumer_inbox`); err != nil || rows != n {
				b.Fatalf("inbox rows = %d (%v), want %d", rows, err, n)
			}
			if c.effect == "full" {
				if got := countStatus(b, f.db.DB, "pending"); got != n {
					b.Fatalf("outbox rows = %d, want %d", got, n)
				}
			}
			if h := handled.Load(); h != int64(n) {
				b.Logf("%d deliveries handled for %d messages", h, n)
			}
			b.ReportMetric(float64(n)/took.Seconds(), "msgs/s")
			b.ReportMetric(float64(n)/raw.Seconds(), "ceiling_msgs/s")
			b.ReportMetric(100*raw.Seconds()/took.Seconds(), "pct_of_ceiling")
		})
	}
}

// newBenchOrders is a fresh database with bench_orders holding orders 1..n.
func newBenchOrders(b *testing.B, n int) *sqldbtest.DB {
	b.Helper()
	db := sqldbtest.New(b, "order")
	fillBenchOrders(b, db, n)
	return db
}

// fillBenchOrders creates bench_orders, the business table of the
// consumer benchmarks, with orders 1..n in status 'new'.
func fillBenchOrders(b *testing.B, db *sqldbtest.DB, n int) {
	b.Helper()
	db.MustExec(`CREATE TABLE bench_orders (id BIGINT UNSIGNED PRIMARY KEY,
  status VARCHAR(16) NOT NULL, version INT UNSIGNED NOT NULL)`)
	for lo := 1; lo <= n; lo += 1000 {
		var sb strings.Builder
		sb.WriteString(`INSERT INTO bench_orders (id, status, version) VALUES `)
		for id := lo; id < lo+1000 && id <= n; id++ {
			if id > lo {
				sb.WriteString(", ")
			}
			fmt.Fprintf(&sb, "(%d, 'new', 1)", id)
		}
		db.MustExec(sb.String())
	}
}

// reserve is a business step of the size of the inventory's: a
// compare-and-set UPDATE of the order's own row and one result event.
func reserve(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
	const q = `UPDATE bench_orders SET status = 'reserved', version = version + 1 WHERE id = ? AND status = 'new'`
	res, err := tx.ExecContext(ctx, q, e.AggregateID)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("order %d: %d rows changed, want 1", e.AggregateID, n)
	}
	_, err = outbox.Add(ctx, tx, outbox.Event{AggregateID: e.AggregateID, AggregateVersion: 2,
		Type: events.InventoryReserved, Payload: events.InventoryReservedV1{OrderID: e.AggregateID,
			CustomerID: "customer-1", Items: []events.Item{{SKU: "SKU-1", Quantity: 2, UnitPriceCents: 8900}},
			AmountCents: 17800, Currency: "EUR"}})
	return err
}

// consumeN runs the consume loop until done counts n, then stops it and
// returns how long the n took.
func consumeN(b *testing.B, conn *rabbit.Conn, cfg rabbit.ConsumeConfig, n int, h rabbit.Handler, done *atomic.Int64) time.Duration {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	start := time.Now()
	go func() { defer wg.Done(); _ = conn.Consume(ctx, cfg, h) }()
	deadline := start.Add(5 * time.Minute)
	for done.Load() < int64(n) {
		if time.Now().After(deadline) {
			cancel()
			wg.Wait()
			b.Fatalf("consumed %d of %d in 5 minutes", done.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
	took := time.Since(start)
	cancel()
	wg.Wait()
	return took
}

// BenchmarkCommitRate is the database alone: b.N small durable
// transactions (-benchtime 5000x) from C connections at once. tx=insert is
// BEGIN, one INSERT, COMMIT: the commit-rate ceiling (every COMMIT waits
// for the redo log flush; concurrent ones share a flush, group commit).
// tx=consumer is the consumer's transaction without the broker: the inbox
// row, the compare-and-set UPDATE and the outbox event of
// BenchmarkConsumer/effect=full.
func BenchmarkCommitRate(b *testing.B) {
	for _, shape := range []string{"insert", "consumer"} {
		for _, conns := range []int{1, 4, 16, 32, 64} {
			b.Run(fmt.Sprintf("tx=%s/conns=%d", shape, conns), func(b *testing.B) {
				b.StopTimer()
				db := newBenchOrders(b, b.N)
				ctx := context.Background()
				var next atomic.Int64
				var wg sync.WaitGroup
				errs := make(chan error, conns)
				cpu := benchtest.StartCPU()
				b.StartTimer()
				start := time.Now()
				for range conns {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							i := next.Add(1)
							if i > int64(b.N) {
								return
							}
							id := uuid.NewString()
							err := sqldb.WithTx(ctx, db.DB, func(tx *sqlx.Tx) error {
								if err := inbox.ClaimPayload(ctx, tx, "bench", id, nil); err != nil {
									return err
								}
								if shape == "insert" {
									return nil
								}
								return reserve(ctx, tx, events.Envelope{EventID: id, AggregateID: uint64(i)})
							})
							if err != nil {
								errs <- err
								return
							}
						}
					}()
				}
				wg.Wait()
				took := time.Since(start)
				b.StopTimer()
				cpu.Report(b, "")
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N)/took.Seconds(), "tx/s")
			})
		}
	}
}
