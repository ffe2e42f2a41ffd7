// Package benchtest holds what the benchmarks of bench/ and the peer
// comparison of bench/peers/watermill (a module of its own) share: the CPU
// meter both report cores with, the drain loop that empties an outbox with
// our dispatcher, a plain broker channel, the knobs they read from the
// environment, the events of their backlogs and the prefill that commits
// them. One copy, so that the two sides of a comparison are measured the
// same way.
package benchtest

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/prometheus/procfs"
	amqp "github.com/rabbitmq/amqp091-go"
	"golang.org/x/sync/errgroup"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

// EnvInt reads a positive integer knob of a benchmark (BENCH_RATE=200 ...).
func EnvInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}

// OrderCreated is a realistic payload: what the order service writes for a
// two-line order (about 200 bytes).
func OrderCreated(id uint64) events.OrderCreatedV1 {
	return events.OrderCreatedV1{OrderID: id, CustomerID: fmt.Sprintf("customer-%d", id%1000),
		Items:      []events.Item{{SKU: "SKU-1", Quantity: 2, UnitPriceCents: 8900}, {SKU: "SKU-2", Quantity: 1, UnitPriceCents: 1200}},
		TotalCents: 19000, Currency: "EUR"}
}

// Envelope is OrderCreated for order id with a fresh event id: the event
// as the order service's outbox sends it.
func Envelope(id uint64) events.Envelope {
	body, err := json.Marshal(OrderCreated(id))
	if err != nil {
		panic(err) // plain fields: it cannot fail
	}
	return events.Envelope{EventID: uuid.NewString(), Type: events.OrderCreated, AggregateID: id, AggregateVersion: 1,
		SchemaVersion: events.CurrentSchemaVersion, CorrelationID: strconv.FormatUint(id, 10), OccurredAt: time.Now().UTC(),
		Payload: body}
}

// Prefill commits n pending OrderCreated events (orders first+1 ..
// first+n) into the outbox with outbox.Add, 500 per transaction, and
// returns their event ids.
func Prefill(t testing.TB, db *sqlx.DB, first, n int) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for done := 0; done < n; {
		batch := min(500, n-done)
		evs := make([]outbox.Event, batch)
		for i := range evs {
			id := uint64(first + done + i + 1)
			evs[i] = outbox.Event{AggregateID: id, AggregateVersion: 1, Type: events.OrderCreated, Payload: OrderCreated(id)}
		}
		err := sqldb.WithTx(ctx, db, func(tx *sqlx.Tx) error {
			got, err := outbox.Add(ctx, tx, evs...)
			ids = append(ids, got...)
			return err
		})
		if err != nil {
			t.Fatalf("prefill the outbox: %v", err)
		}
		done += batch
	}
	return ids
}

// QueueDepth is the number of ready messages in queue.
func QueueDepth(t testing.TB, queue string) int {
	t.Helper()
	return rabbittest.Inspect(t, queue).Messages
}

// Purge empties queue, so that the next phase publishes into an empty one.
func Purge(t testing.TB, queue string) {
	t.Helper()
	rabbittest.Channel(t, func(ch *amqp.Channel) error {
		if _, err := ch.QueuePurge(queue, false); err != nil {
			return fmt.Errorf("purge %s: %w", queue, err)
		}
		return nil
	})
}

// Drain runs one DispatchOnce loop per publisher until a claim comes back
// empty (what a Dispatcher worker does with a backlog), and returns how
// long it took.
func Drain(b *testing.B, d *outbox.Dispatcher, pubs []outbox.Publisher) time.Duration {
	b.Helper()
	return InParallel(b, "dispatch", len(pubs), func(i int) error {
		for {
			res, err := d.DispatchOnce(context.Background(), pubs[i])
			if err != nil || res.Claimed == 0 {
				return err
			}
		}
	})
}

// InParallel runs work(0) .. work(n-1) at once and returns how long they
// took together; an error of any fails the benchmark, named by what.
func InParallel(b *testing.B, what string, n int, work func(i int) error) time.Duration {
	b.Helper()
	start := time.Now()
	var g errgroup.Group
	for i := range n {
		g.Go(func() error { return work(i) })
	}
	err := g.Wait()
	took := time.Since(start)
	if err != nil {
		b.Fatalf("%s: %v", what, err)
	}
	return took
}

// CPU measures the CPU time the database server ("db"), the broker ("mq")
// and this process ("go") use over an interval, from /proc through procfs
// (Linux; elsewhere it measures nothing). Cores = CPU seconds / wall
// seconds. Other is everything else busy on the machine meanwhile (other
// tests sharing the servers' host): a high value means the figure is
// disturbed.
type CPU struct {
	fs    procfs.FS
	pids  map[string][]int
	start map[string]float64
	busy0 float64
	t0    time.Time
}

// Kinds are the processes a CPU meter follows, in report order.
var Kinds = []string{"db", "mq", "go"}

// StartCPU starts measuring.
func StartCPU() *CPU {
	m := &CPU{start: map[string]float64{}}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return m // not Linux: no pids, nothing reported
	}
	m.fs = fs
	m.pids = map[string][]int{
		"db": append(m.oldestByComm("mariadbd"), m.oldestByComm("mysqld")...),
		"mq": m.oldestByComm("beam.smp"),
		"go": {os.Getpid()},
	}
	for k, pids := range m.pids {
		m.start[k] = m.cpuSeconds(pids)
	}
	m.busy0 = m.machineBusy()
	m.t0 = time.Now()
	return m
}

// Seconds is the CPU time the processes of kind k have used since the
// start; ok is false when there is no such process to measure.
func (m *CPU) Seconds(k string) (secs float64, ok bool) {
	if len(m.pids[k]) == 0 {
		return 0, false
	}
	return m.cpuSeconds(m.pids[k]) - m.start[k], true
}

// Cores is the cores each kind used since the start (0 for one not
// measured) and other, what the rest of the machine used meanwhile.
func (m *CPU) Cores() (cores map[string]float64, other float64) {
	cores = map[string]float64{}
	wall := time.Since(m.t0).Seconds()
	if wall <= 0 {
		return cores, 0
	}
	var ours float64
	for _, k := range Kinds {
		if s, ok := m.Seconds(k); ok {
			cores[k] = s / wall
			ours += s / wall
		}
	}
	if m.busy0 > 0 {
		other = max(0, (m.machineBusy()-m.busy0)/wall-ours)
	}
	return cores, other
}

// Report adds <prefix>db_cores, mq_cores, go_cores and other_cores to the
// benchmark, for the kinds measured.
func (m *CPU) Report(b *testing.B, prefix string) {
	cores, other := m.Cores()
	for _, k := range Kinds {
		if c, ok := cores[k]; ok {
			b.ReportMetric(math.Round(c*100)/100, prefix+k+"_cores")
		}
	}
	if m.busy0 > 0 {
		b.ReportMetric(math.Round(other*100)/100, prefix+"other_cores")
	}
}

// machineBusy is the busy time of all CPUs in seconds (/proc/stat).
func (m *CPU) machineBusy() float64 {
	st, err := m.fs.Stat()
	if err != nil {
		return 0
	}
	c := st.CPUTotal // guest time is inside user
	return c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal
}

// cpuSeconds is the user+system time the processes have used.
func (m *CPU) cpuSeconds(pids []int) float64 {
	var sum float64
	for _, pid := range pids {
		p, err := m.fs.Proc(pid)
		if err != nil {
			continue
		}
		if st, err := p.Stat(); err == nil {
			sum += st.CPUTime()
		}
	}
	return sum
}

// oldestByComm returns the oldest process with that command name (the
// server itself, not a short-lived rabbitmqctl that is also a beam.smp;
// pids wrap, so the lowest pid is not always the oldest).
func (m *CPU) oldestByComm(comm string) []int {
	procs, _ := m.fs.AllProcs()
	best, bestStart := 0, uint64(math.MaxUint64)
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil || st.Comm != comm {
			continue
		}
		if st.Starttime < bestStart {
			best, bestStart = p.PID, st.Starttime
		}
	}
	if best == 0 {
		return nil
	}
	return []int{best}
}
