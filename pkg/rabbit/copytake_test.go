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
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

// A delivery and its copy in one take, made on purpose (what the chaos
// run's copy-take fault does to every consumer of a stack): every worker is
// held at rabbit.consume.before-handle with a take of its own, two copies
// of one message are published back to back and wait behind them, and
// once the workers are let go the next take holds both; the take is seen
// at rabbit.consume.copy-in-take, which is hit for no other take.
func TestCopyInOneTake(t *testing.T) {
	t.Parallel()
	ns := rabbittest.Namespace(t)
	topo := rabbittest.Topology(t, ns, rabbit.Queue{Name: "probe.events", Keys: []string{events.OrderCreated}})
	conn := rabbittest.Conn(t, topo)
	queue := topo.Queues[0].Name
	const workers = 4

	reg := failpoint.NewRegistry()
	hold := reg.Pause(rabbit.FailpointBeforeHandle, 0)
	var mu sync.Mutex
	var takes [][]string
	handle := func(ctx context.Context, ds []rabbit.Delivery) []rabbit.Decision {
		ids := make([]string, len(ds))
		out := make([]rabbit.Decision, len(ds))
		for i, d := range ds {
			ids[i], out[i] = d.MessageId, rabbit.Ack()
		}
		mu.Lock()
		takes = append(takes, ids)
		mu.Unlock()
		return out
	}
	ctx, cancel := context.WithCancel(failpoint.WithRegistry(context.Background(), reg))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = conn.ConsumeBatch(ctx, rabbit.ConsumeConfig{Queue: queue, Workers: workers, Batch: 16, Log: quiet}, handle)
	}()
	defer func() { cancel(); hold.Release(); <-done }()
	testutil.WaitFor(t, 10*time.Second, "the consumer", func() bool { return consumers(t, queue) == 1 })

	pub := conn.NewPublisher()
	defer pub.Close()
	send := func(id string) {
		t.Helper()
		msg := rabbit.FromEnvelope(ns.Exchange(), events.Envelope{EventID: id, Type: events.OrderCreated,
			AggregateID: 1, AggregateVersion: 1, SchemaVersion: 1, Payload: []byte(`{}`)})
		if err := pub.Publish(context.Background(), []rabbit.Message{msg}, 5*time.Second)[0]; err != nil {
			t.Fatal(err)
		}
	}
	// One filler per worker, one at a time: each idle worker takes one and
	// is held with it; a last one waits behind them.
	for i := range workers + 1 {
		send(fmt.Sprintf("filler-%d", i))
		if i < workers {
			testutil.WaitFor(t, 10*time.Second, "a worker held", func() bool { return paused(reg, rabbit.FailpointBeforeHandle) == i+1 })
		}
	}
	send("twin")
	send("twin")
	time.Sleep(200 * time.Millisecond) // both in the client's hands
	seen := reg.Pause(rabbit.FailpointCopyInTake, 0)
	hold.Release()
	select {
	case <-seen.Reached():
	case <-time.After(10 * time.Second):
		t.Fatalf("no take held the delivery and its copy; takes: %v", snapshotTakes(&mu, &takes))
	}
	seen.Release()
	testutil.WaitFor(t, 10*time.Second, "every delivery handled", func() bool {
		n := 0
		for _, take := range snapshotTakes(&mu, &takes) {
			n += len(take)
		}
		return n == workers+3
	})
	var together bool
	for _, take := range snapshotTakes(&mu, &takes) {
		if n := len(slices.DeleteFunc(slices.Clone(take), func(id string) bool { return id != "twin" })); n == 2 {
			together = true
		}
	}
	if !together {
		t.Errorf("takes %v: want one holding both copies of twin", snapshotTakes(&mu, &takes))
	}
	if hits := reg.Hits(rabbit.FailpointCopyInTake); hits != 1 {
		t.Errorf("%s hit %d times, want once (only the take with the copy)", rabbit.FailpointCopyInTake, hits)
	}
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

func snapshotTakes(mu *sync.Mutex, takes *[][]string) [][]string {
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(*takes)
}

// consumers is how many consumers queue has.
func consumers(t *testing.T, queue string) int {
	t.Helper()
	raw := rabbittest.Dial(t)
	defer raw.Close()
	ch, err := raw.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Consumers
}
