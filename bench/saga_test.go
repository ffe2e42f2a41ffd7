package bench

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/benchtest"
	"github.com/relmsg/ordersaga/internal/sagatest"
)

// BenchmarkSagaCost runs the three services in-process (sagatest, each with
// its own database behind a statement counter) and pushes b.N orders
// through the whole saga (-benchtime 500x), 8 at a time, 5% of them for a
// declined customer. It reports what one order costs: SQL statements and
// transactions per service, and CPU milliseconds in the database server,
// the broker and the Go processes (the three services and this client
// together). Statements the services issue anyway (the idle polls) are
// subtracted. This is the budget behind the saga's throughput on a given
// machine: orders/s <= cores / cpu_ms_per_order.
func BenchmarkSagaCost(b *testing.B) {
	counters := map[string]*sqlCounter{}
	proxied := func(name string, env map[string]string) {
		c := newSQLCounter(b)
		counters[name] = c
		env["MYSQL_DSN"] = c.dsn(b, env["MYSQL_DSN"])
		env["OUTBOX_LEASE"] = "5s" // as scripts/up.sh
	}
	s := sagatest.Start(b, proxied, sagatest.WithoutContractChecks())
	n := b.N
	for _, sku := range []string{"SKU-1", "SKU-2", "SKU-4"} {
		if code := s.Inventory.Do(http.MethodPost, "/stock/"+sku+"/receipts", map[string]string{"Idempotency-Key": "bench-restock-" + sku},
			map[string]int{"quantity": 2*n + 10}, nil); code != http.StatusOK {
			b.Fatalf("restock %s: %d", sku, code)
		}
	}
	time.Sleep(2 * time.Second)
	idle := map[string]map[string]int{}
	for name, c := range counters {
		idle[name] = c.snapshot()
	}
	time.Sleep(5 * time.Second) // the idle rate, to subtract
	before := map[string]map[string]int{}
	for name, c := range counters {
		before[name] = c.snapshot()
	}

	cpu := benchtest.StartCPU()
	b.ResetTimer()
	start := time.Now()
	sendOrders(b, s, n)
	// Done when every order is terminal (read on a connection of our own,
	// not counted) and the services have gone back to their idle rate.
	sagatest.Eventually(b, 2*time.Minute, "every order terminal", func() bool {
		var done int
		_ = s.Order.DB.Get(&done, `SELECT COUNT(*) FROM orders WHERE status IN ('confirmed', 'rejected', 'cancelled')`)
		return done == n
	})
	settle(counters)
	took := time.Since(start)
	b.StopTimer()

	reportCost(b, counters, idle, before, cpu, n, took.Seconds())
}

// sendOrders creates orders 0..n-1 from 8 clients at once, one in twenty
// for a customer the PSP declines.
func sendOrders(b *testing.B, s *sagatest.Saga, n int) {
	skus := []string{"SKU-1", "SKU-2", "SKU-4"}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				customer := fmt.Sprintf("c-%d", i)
				if i%20 == 0 {
					customer = fmt.Sprintf("decline-%d", i)
				}
				body := map[string]any{"customer_id": customer, "items": []map[string]any{
					{"sku": skus[i%3], "quantity": 1}, {"sku": skus[(i+1)%3], "quantity": 1}}}
				code, err := s.Order.TryDo(http.MethodPost, "/orders",
					map[string]string{"Idempotency-Key": fmt.Sprintf("cost-%d", i)}, body, nil)
				if err != nil || code != http.StatusAccepted {
					b.Errorf("create order %d: %d %v", i, code, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// reportCost reports what one order cost each service (statements and
// transactions, less the idle rate measured over 5 s between idle and
// before) and each kind of process (CPU), over wall seconds.
func reportCost(b *testing.B, counters map[string]*sqlCounter, idle, before map[string]map[string]int, cpu *benchtest.CPU, n int, wall float64) {
	var all float64
	for _, name := range slices.Sorted(maps.Keys(counters)) {
		idleKinds, idleTotal := diff(idle[name], before[name]) // 5 s of idle
		kinds, total := diff(before[name], counters[name].snapshot())
		idleRate := float64(idleTotal) / 5
		perOrder := (float64(total) - idleRate*wall) / float64(n)
		all += perOrder
		b.ReportMetric(perOrder, name+"_stmts/order")
		b.ReportMetric(float64(kinds["COMMIT"]-int(float64(idleKinds["COMMIT"])/5*wall))/float64(n), name+"_tx/order")
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(kinds)) {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(kinds[k])/float64(n)))
		}
		b.Logf("%s per order: %s (idle %.1f/s subtracted from the total)", name, strings.Join(parts, ", "), idleRate)
	}
	b.ReportMetric(all, "stmts/order")
	for _, k := range benchtest.Kinds {
		if secs, ok := cpu.Seconds(k); ok {
			b.ReportMetric(secs*1000/float64(n), k+"_cpu_ms/order")
		}
	}
	b.ReportMetric(float64(n)/wall, "orders/s")
}

// settle waits until the counted statements grow by no more than the idle
// polls (a few a second) for two seconds in a row.
func settle(counters map[string]*sqlCounter) {
	total := func() int {
		sum := 0
		for _, c := range counters {
			for k, v := range c.snapshot() {
				if k != "QUIT" {
					sum += v
				}
			}
		}
		return sum
	}
	last, calm := total(), 0
	for calm < 2 {
		time.Sleep(time.Second)
		now := total()
		if now-last <= 3*len(counters) {
			calm++
		} else {
			calm = 0
		}
		last = now
	}
}
