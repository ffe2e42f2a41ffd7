package rabbit_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

// A delivery and its copy in one take, made on purpose (what the chaos
// run's copy-take fault does to every consumer of a stack): every worker is
// held at rabbit.consume.before-handle with a take of its own, two copies
// of one message are published back to back and wait behind them, and
// once the workers are let go the next take holds both; the take is seen
// at rabbit.consume.copy-in-take, which is hit for no other take.
//
// One worker: workers let go together race for what waits, and one of
// them can take a copy while another is still gathering its take (a
// loaded machine once split the copies so). What is proved is the take,
// not the number of workers.
func TestCopyInOneTake(t *testing.T) {
	t.Parallel()
	p := newProbe(t, rabbit.Queue{})
	queue := p.queue.Name
	const workers = 1

	reg := failpoint.NewRegistry()
	hold := reg.Pause(rabbit.FailpointBeforeHandle, 0)
	var takes takeLog
	loop(t, func(ctx context.Context) {
		cfg := rabbit.ConsumeConfig{Queue: queue, Workers: workers, Batch: 16, Log: quiet}
		_ = p.conn.ConsumeBatch(failpoint.WithRegistry(ctx, reg), cfg, takes.handle)
	})
	t.Cleanup(hold.Release) // before the loop stops: its workers may be held
	testutil.WaitFor(t, 10*time.Second, "the consumer", func() bool { return consumers(t, queue) == 1 })

	// One filler per worker, one at a time: each idle worker takes one and
	// is held with it; a last one waits behind them.
	for i := range workers + 1 {
		p.publish(t, fmt.Sprintf("filler-%d", i))
		if i < workers {
			testutil.WaitFor(t, 10*time.Second, "a worker held", func() bool { return paused(reg, rabbit.FailpointBeforeHandle) == i+1 })
		}
	}
	p.publish(t, "twin")
	p.publish(t, "twin")
	testutil.WaitFor(t, 10*time.Second, "the broker to hand every message over", func() bool { return rabbittest.Inspect(t, queue).Messages == 0 })
	time.Sleep(200 * time.Millisecond) // and the client to pass them to its workers' channel
	seen := reg.Pause(rabbit.FailpointCopyInTake, 0)
	hold.Release()
	select {
	case <-seen.Reached():
	case <-time.After(10 * time.Second):
		t.Fatalf("no take held the delivery and its copy; takes: %v", takes.snapshot())
	}
	seen.Release()
	testutil.WaitFor(t, 10*time.Second, "every delivery handled", func() bool { return takes.deliveries() == workers+3 })
	var together bool
	for _, take := range takes.snapshot() {
		if n := len(slices.DeleteFunc(slices.Clone(take), func(id string) bool { return id != "twin" })); n == 2 {
			together = true
		}
	}
	if !together {
		t.Errorf("takes %v: want one holding both copies of twin", takes.snapshot())
	}
	if hits := reg.Hits(rabbit.FailpointCopyInTake); hits != 1 {
		t.Errorf("%s hit %d times, want once (only the take with the copy)", rabbit.FailpointCopyInTake, hits)
	}
}

// takeLog records the message ids of every take a batch handler is given.
type takeLog struct {
	mu    sync.Mutex
	takes [][]string
}

// handle is a rabbit.BatchHandler that records the take and acks it.
func (l *takeLog) handle(_ context.Context, ds []rabbit.Delivery) []rabbit.Decision {
	ids := make([]string, len(ds))
	out := make([]rabbit.Decision, len(ds))
	for i, d := range ds {
		ids[i], out[i] = d.MessageId, rabbit.Ack()
	}
	l.mu.Lock()
	l.takes = append(l.takes, ids)
	l.mu.Unlock()
	return out
}

func (l *takeLog) snapshot() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.takes)
}

// deliveries counts the deliveries of every take so far.
func (l *takeLog) deliveries() int {
	n := 0
	for _, take := range l.snapshot() {
		n += len(take)
	}
	return n
}

// paused is how many goroutines wait at the point now.
func paused(reg *failpoint.Registry, point string) int {
	for _, st := range reg.Armed() {
		if st.Name == point {
			return st.Paused
		}
	}
	return 0
}

// consumers is how many consumers queue has.
func consumers(t *testing.T, queue string) int {
	t.Helper()
	return rabbittest.Inspect(t, queue).Consumers
}
