package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/internal/benchtest"
	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

// BenchmarkRetryTier is what a delayed retry costs in each kind of retry
// tier: the classic queue of earlier versions and the quorum queue with
// at-least-once dead-lettering that pkg/rabbit declares now (the arguments
// of declareRetryQueue in topology.go, written out here). Each retry is
// published as the consume loop does it: one persistent message, its
// confirm awaited before the next (publishers publish in parallel, one
// rabbit.Publisher each). The copies expire at once, so the hop back to the
// consumer's quorum queue (dead-lettering) runs during the publishing, as
// under a burst of retries; back_s is until every copy is back.
//
//	go test ./bench -run '^$' -bench RetryTier -benchtime 2000x
func BenchmarkRetryTier(b *testing.B) {
	kinds := []struct {
		name string
		args amqp.Table
	}{
		{"classic", amqp.Table{}},
		{"quorum-at-least-once", amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum,
			"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}},
	}
	for _, kind := range kinds {
		for _, publishers := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/publishers=%d", kind.name, publishers), func(b *testing.B) {
				b.StopTimer()
				ns := rabbittest.Namespace(b)
				topo := rabbittest.Topology(b, ns, rabbit.Queue{Name: "bench.events"})
				conn := rabbittest.Conn(b, topo)
				f := &fixture{ns: ns, conn: conn, queue: topo.Queues[0].Name}
				tier := declareTier(b, f.queue, kind.args)
				msgs := messages("", b.N)
				for i := range msgs {
					msgs[i].RoutingKey = tier
					msgs[i].Publishing.Expiration = "1"
				}
				cpu := benchtest.StartCPU()
				b.StartTimer()
				start := time.Now()
				lat := publishOneByOne(b, conn, msgs, publishers)
				took := time.Since(start)
				testutil.WaitFor(b, 5*time.Minute, fmt.Sprintf("all %d retries back", b.N), func() bool {
					return f.queueDepth(b) >= b.N
				})
				back := time.Since(start)
				b.StopTimer()
				cpu.Report(b, "")
				b.ReportMetric(float64(b.N)/took.Seconds(), "retries/s")
				b.ReportMetric(back.Seconds(), "back_s")
				reportLatency(b, "publish_", lat)
			})
		}
	}
}

// declareTier declares tier 0 of queue with the given arguments plus the
// dead-lettering back to queue that every kind has.
func declareTier(b *testing.B, queue string, kind amqp.Table) string {
	b.Helper()
	args := amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": queue}
	for k, v := range kind {
		args[k] = v
	}
	name := rabbit.RetryQueue(queue, 0) // deleted with the topology
	rabbittest.Channel(b, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(name, true, false, false, false, args)
		return err
	})
	return name
}

// publishOneByOne publishes msgs with `publishers` Publishers in parallel,
// one message per Publish call (its confirm awaited), and returns each
// call's latency.
func publishOneByOne(b *testing.B, conn *rabbit.Conn, msgs []rabbit.Message, publishers int) []time.Duration {
	b.Helper()
	lat := make([]time.Duration, len(msgs))
	errs := make(chan error, publishers)
	var wg sync.WaitGroup
	for w := range publishers {
		pub := conn.NewPublisher()
		defer pub.Close()
		wg.Go(func() {
			for i := w; i < len(msgs); i += publishers {
				t0 := time.Now()
				if err := pub.Publish(context.Background(), msgs[i:i+1], 30*time.Second)[0]; err != nil {
					errs <- fmt.Errorf("retry %d: %w", i, err)
					return
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return lat
}
