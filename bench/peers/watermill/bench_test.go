package watermillpeer_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	peer "github.com/relmsg/ordersaga/bench/peers/watermill"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

// BenchmarkDrain drains a backlog of b.N committed OrderCreated events
// (run it with -benchtime 20000x) to one durable quorum queue, with our
// dispatcher exactly as BenchmarkOutboxDrain in bench/ drives it (one
// claim-publish-mark loop per dispatcher, each with its own
// rabbit.Publisher, until a claim comes back empty) and with watermill's
// Forwarder, in the same run on the same servers. Each round runs every
// side once, each on a fresh database and an empty queue, in an order that
// rotates from round to round. Before its timed drain each side drains a
// warm-up of 1,000 events on its own database and connections (not timed,
// queue purged after).
//
// BENCH_ROUNDS (default 3) sets the number of rounds; BENCH_FIRST_ROUND
// numbers them from another round, to run them one at a time when the
// machine is quiet (BENCH_ROUNDS=1 BENCH_FIRST_ROUND=2 runs round 2 alone,
// in round 2's order).
//
// Reported per round: events/s of each side and the ratio of each of ours
// to the Forwarder's; logged: the order the sides ran in and the CPU each
// timed drain used (database, broker, this process, anything else).
func BenchmarkDrain(b *testing.B) {
	type side struct {
		name string
		run  func(b *testing.B, n int) drained
	}
	sides := []side{
		{"ours_1x100", func(b *testing.B, n int) drained { return drainOurs(b, n, 1, 100) }},
		{"ours_2x500", func(b *testing.B, n int) drained { return drainOurs(b, n, 2, 500) }},
		{"watermill", func(b *testing.B, n int) drained { return drainPeer(b, n, 0) }},
	}
	if os.Getenv("BENCH_WATERMILL_BATCH500") == "1" {
		// SubscribeBatchSize 500: fewer SELECTs and COMMITs per event, the
		// same one-confirm-at-a-time publishing.
		sides = append(sides, side{"watermill_b500", func(b *testing.B, n int) drained { return drainPeer(b, n, 500) }})
	}
	rounds, first := envInt("BENCH_ROUNDS", 3), envInt("BENCH_FIRST_ROUND", 1)
	for r := first - 1; r < first-1+rounds; r++ {
		b.Run(fmt.Sprintf("round=%d", r+1), func(b *testing.B) {
			b.StopTimer()
			rate := map[string]float64{}
			var cpuLog []string
			for i := range sides {
				s := sides[(i+r)%len(sides)]
				d := s.run(b, b.N)
				rate[s.name] = float64(b.N) / d.took.Seconds()
				b.ReportMetric(rate[s.name], s.name+"_events/s")
				cpuLog = append(cpuLog, fmt.Sprintf("%s %.0f events/s, cores db %.2f mq %.2f go %.2f other %.2f",
					s.name, rate[s.name], d.db, d.mq, d.goCPU, d.other))
			}
			b.Logf("n=%d, in this order: %s", b.N, strings.Join(cpuLog, "; "))
			b.ReportMetric(rate["ours_1x100"]/rate["watermill"], "ratio_1x100")
			b.ReportMetric(rate["ours_2x500"]/rate["watermill"], "ratio_2x500")
		})
	}
}

const warmup = 1000

// envInt reads a positive integer knob of the benchmark.
func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}

// drained is one timed drain: how long it took and the CPU it used.
type drained struct {
	took                 time.Duration
	db, mq, goCPU, other float64
}

func (d *drained) stop(start time.Time, c *cpu) {
	d.took = time.Since(start)
	d.db, d.mq, d.goCPU, d.other = c.cores()
}

// drainOurs: a fresh world, a dispatcher with workers x batch, one
// rabbit.Publisher per worker (RabbitPublishers, as the services use),
// warm-up, then the timed drain of n events. It checks that all n are
// 'sent' and in the queue.
func drainOurs(b *testing.B, n, workers, batch int) drained {
	b.Helper()
	w := newWorld(b)
	conn := rabbittest.Conn(b, w.topo)
	d := outbox.New(w.db.DB, outbox.Config{Exchange: w.ns.Exchange(), Workers: workers, BatchSize: batch,
		Log: quiet, NewPublisher: outbox.RabbitPublishers(conn)})
	pubs := make([]outbox.Publisher, workers)
	for i := range pubs {
		pubs[i] = outbox.RabbitPublishers(conn)()
		defer pubs[i].Close()
	}
	warm := min(warmup, n)
	prefillOurs(b, w.db.DB, 0, warm)
	drainLoops(b, d, pubs)
	w.purge(b)

	prefillOurs(b, w.db.DB, warm, n)
	var res drained
	c := startCPU()
	b.StartTimer()
	start := time.Now()
	drainLoops(b, d, pubs)
	res.stop(start, c)
	b.StopTimer()
	var sent int
	if err := w.db.Get(&sent, `SELECT COUNT(*) FROM outbox_events WHERE status = 'sent'`); err != nil {
		b.Fatal(err)
	}
	if sent != warm+n {
		b.Fatalf("sent rows = %d, want %d", sent, warm+n)
	}
	if depth := w.queueDepth(b); depth != n {
		b.Fatalf("queue depth = %d, want %d", depth, n)
	}
	return res
}

// drainLoops runs one DispatchOnce loop per publisher until a claim comes
// back empty: what a Dispatcher worker does with a backlog.
func drainLoops(b *testing.B, d *outbox.Dispatcher, pubs []outbox.Publisher) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(pubs))
	for _, pub := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				res, err := d.DispatchOnce(context.Background(), pub)
				if err != nil {
					errs <- err
					return
				}
				if res.Claimed == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatalf("dispatch: %v", err)
	}
}

// drainPeer: a fresh world, the Forwarder's tables, one watermill-amqp
// publisher (its connection and channel pool kept across warm-up and
// timed drain), warm-up through a first Forwarder, then the timed drain of
// n events by a second one. The clock stops when the consumer group's
// acked offset reaches the last row, i.e. when the Forwarder has committed
// what it forwarded (our side stops after its mark-sent). batch is
// SubscribeBatchSize (0: the default, 100).
func drainPeer(b *testing.B, n, batch int) drained {
	b.Helper()
	w := newWorld(b)
	w.declare(b, true)
	s := peer.Documented(batch)
	if err := peer.InitSchema(w.db.DB.DB, s); err != nil {
		b.Fatal(err)
	}
	pub, err := peer.NewAMQPPublisher(rabbittest.URL(), w.ns.Exchange())
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()

	forward := func(count int, res *drained) {
		var last int64
		if err := w.db.Get(&last, "SELECT MAX(`offset`) FROM `watermill_"+peer.Topic+"`"); err != nil {
			b.Fatal(err)
		}
		rec := newRecorder(pub, count)
		fwd, err := peer.NewForwarder(w.db.DB.DB, s, rec, 0)
		if err != nil {
			b.Fatal(err)
		}
		c := startCPU()
		start := time.Now()
		stop, err := peer.Start(context.Background(), fwd)
		if err != nil {
			b.Fatal(err)
		}
		select {
		case <-rec.done:
		case <-time.After(10 * time.Minute):
			b.Fatalf("forwarded %d of %d in 10 minutes", rec.ok, count)
		}
		for {
			var acked int64
			const q = "SELECT COALESCE(MAX(offset_acked), 0) FROM `watermill_offsets_" + peer.Topic + "`"
			if err := w.db.Get(&acked, q); err != nil {
				b.Fatal(err)
			}
			if acked >= last {
				break
			}
			time.Sleep(time.Millisecond)
		}
		res.stop(start, c)
		if err := stop(); err != nil {
			b.Fatalf("stop forwarder: %v", err)
		}
	}

	warm := min(warmup, n)
	prefillPeer(b, w.db.DB, s, 0, warm)
	forward(warm, new(drained))
	w.purge(b)

	prefillPeer(b, w.db.DB, s, warm, n)
	var res drained
	b.StartTimer()
	forward(n, &res)
	b.StopTimer()
	if depth := w.queueDepth(b); depth != n {
		b.Fatalf("queue depth = %d, want %d", depth, n)
	}
	return res
}

// cpu measures, over one timed drain, the CPU used by the database
// server, the broker and this process, in cores (CPU seconds per wall
// second), and other: what else kept the machine busy meanwhile (the
// machine is shared; a high value means a disturbed run). Linux /proc
// only; elsewhere it reports zeros.
type cpu struct {
	t0    time.Time
	pids  []int // mariadbd (or mysqld), beam.smp, this process
	ticks []int64
	all   int64
}

func startCPU() *cpu {
	db := pidOf("mariadbd")
	if db == 0 {
		db = pidOf("mysqld")
	}
	c := &cpu{t0: time.Now(), pids: []int{db, pidOf("beam.smp"), os.Getpid()}}
	for _, p := range c.pids {
		c.ticks = append(c.ticks, procTicks(p))
	}
	c.all = machineTicks()
	return c
}

// cores returns db, mq, go and other cores since startCPU.
func (c *cpu) cores() (db, mq, goc, other float64) {
	wall := time.Since(c.t0).Seconds() * 100 // USER_HZ = 100 ticks per second
	var v [3]float64
	for i, p := range c.pids {
		v[i] = float64(procTicks(p)-c.ticks[i]) / wall
	}
	all := float64(machineTicks()-c.all) / wall
	return v[0], v[1], v[2], max(0, all-v[0]-v[1]-v[2])
}

// pidOf is the oldest process whose command is comm (the server, not a
// short-lived rabbitmqctl, which is also a beam.smp; pids wrap, so the
// lowest pid is not always the oldest), 0 if none.
func pidOf(comm string) int {
	dirs, _ := filepath.Glob("/proc/[0-9]*/comm")
	best, bestStart := 0, int64(-1)
	for _, d := range dirs {
		c, err := os.ReadFile(d)
		if err != nil || strings.TrimSpace(string(c)) != comm {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if err != nil {
			continue
		}
		if f := procStat(pid); len(f) > 19 {
			start, _ := strconv.ParseInt(f[19], 10, 64) // field 22: start time
			if bestStart < 0 || start < bestStart {
				best, bestStart = pid, start
			}
		}
	}
	return best
}

// procStat is /proc/<pid>/stat from field 3 on (after the command, which
// may contain spaces).
func procStat(pid int) []string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	_, rest, _ := strings.Cut(string(raw), ") ")
	return strings.Fields(rest)
}

// procTicks is a process's user + system time in ticks (fields 14 and 15).
func procTicks(pid int) int64 {
	f := procStat(pid)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

// machineTicks is the busy time of all CPUs in ticks: the first line of
// /proc/stat without idle and iowait (guest time is inside user).
func machineTicks() int64 {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	var total int64
	for i, f := range strings.Fields(line)[1:] {
		if i == 3 || i == 4 || i >= 8 {
			continue
		}
		v, _ := strconv.ParseInt(f, 10, 64)
		total += v
	}
	return total
}
