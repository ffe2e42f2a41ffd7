package watermillpeer_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	peer "github.com/relmsg/ordersaga/bench/peers/watermill"
	"github.com/relmsg/ordersaga/internal/benchtest"
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
	rounds, first := benchtest.EnvInt("BENCH_ROUNDS", 3), benchtest.EnvInt("BENCH_FIRST_ROUND", 1)
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

// drained is one timed drain: how long it took and the CPU it used.
type drained struct {
	took                 time.Duration
	db, mq, goCPU, other float64
}

func (d *drained) stop(start time.Time, c *benchtest.CPU) {
	d.took = time.Since(start)
	cores, other := c.Cores()
	d.db, d.mq, d.goCPU, d.other = cores["db"], cores["mq"], cores["go"], other
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
	benchtest.Prefill(b, w.db.DB, 0, warm)
	benchtest.Drain(b, d, pubs)
	w.purge(b)

	benchtest.Prefill(b, w.db.DB, warm, n)
	var res drained
	c := benchtest.StartCPU()
	b.StartTimer()
	start := time.Now()
	benchtest.Drain(b, d, pubs)
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
		c := benchtest.StartCPU()
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
