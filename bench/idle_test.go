package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/benchtest"
	"github.com/relmsg/ordersaga/internal/sagatest"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/outbox"
)

// BenchmarkIdle counts the SQL statements issued with no traffic at all,
// over BENCH_IDLE_SECONDS (default 10) after a 2 s settling time, on the
// wire (sqlCounter): an outbox Dispatcher alone (its workers, fallback
// poller and lease recovery; 2 workers as in the services), and each of the
// three services run in-process (sagatest) with its consumers and
// background jobs. lease=30s is the services' default OUTBOX_LEASE,
// lease=5s the demo value scripts/up.sh sets (recovery runs every lease/3,
// at most every 5 s). The target is under 2 statements/s per idle
// dispatcher. Run with -benchtime 1x.
func BenchmarkIdle(b *testing.B) {
	secs := benchtest.EnvInt("BENCH_IDLE_SECONDS", 10)
	for _, lease := range []time.Duration{30 * time.Second, 5 * time.Second} {
		b.Run(fmt.Sprintf("dispatcher/lease=%s", lease), func(b *testing.B) {
			f := newFixture(b, "order", events.OrderCreated)
			counter := newSQLCounter(b)
			db, err := sqldb.Open(context.Background(), sqldb.Config{DSN: counter.dsn(b, f.db.DSN), MaxOpenConns: 32})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			d := outbox.New(db, outbox.Config{Exchange: f.ns.Exchange(), Workers: 2, BatchSize: 100, Lease: lease,
				Log: quiet, NewPublisher: outbox.RabbitPublishers(f.conn)})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = d.Run(ctx) }()
			defer func() { cancel(); <-done }()
			measureIdle(b, secs, map[string]*sqlCounter{"dispatcher": counter})
		})
	}
	for _, lease := range []string{"30s", "5s"} {
		b.Run("services/lease="+lease, func(b *testing.B) {
			counters := map[string]*sqlCounter{}
			proxied := func(name string, env map[string]string) {
				c := newSQLCounter(b)
				counters[name] = c
				env["MYSQL_DSN"] = c.dsn(b, env["MYSQL_DSN"])
				env["OUTBOX_LEASE"] = lease
				env["LOG_LEVEL"] = "warn"
			}
			sagatest.Start(b, proxied, sagatest.WithoutContractChecks())
			measureIdle(b, secs, counters)
		})
	}
}

// measureIdle waits 2 s, counts statements for secs seconds and reports
// <name>_q/s per counter, with the statement kinds in the log.
func measureIdle(b *testing.B, secs int, counters map[string]*sqlCounter) {
	b.Helper()
	time.Sleep(2 * time.Second)
	before := map[string]map[string]int{}
	for name, c := range counters {
		before[name] = c.snapshot()
	}
	b.ResetTimer()
	time.Sleep(time.Duration(secs) * time.Second)
	b.StopTimer()
	for _, name := range slices.Sorted(maps.Keys(counters)) {
		kinds, total := diff(before[name], counters[name].snapshot())
		qps := float64(total) / float64(secs)
		b.ReportMetric(qps, name+"_q/s")
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(kinds)) {
			parts = append(parts, fmt.Sprintf("%s %.2f/s", k, float64(kinds[k])/float64(secs)))
		}
		b.Logf("%s idle: %.2f statements/s (%s)", name, qps, strings.Join(parts, ", "))
	}
}
