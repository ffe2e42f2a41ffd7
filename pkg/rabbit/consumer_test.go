package rabbit_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

var quiet = slog.New(slog.DiscardHandler)

// 不要无限立即 requeue: when the delayed copy of a failed message cannot be
// published (here its retry queue exists with other arguments, so declaring
// it fails), the message is not put back at the head of its queue to be
// redelivered at once. It stays with its consumer, unacked, while the
// retry is tried again; once the retry queue can be declared, the message
// comes back through the delay path as the next attempt.
func TestFailedRetrySchedulingIsNotAnInstantRequeue(t *testing.T) {
	t.Parallel()
	p := newProbe(t, rabbit.Queue{})
	queue := p.queue.Name
	const delay = 300 * time.Millisecond
	retryQueue := rabbit.RetryQueue(queue, rabbit.RetryTier(delay))
	raw := rabbittest.Dial(t)
	defer raw.Close()
	ch, err := raw.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(retryQueue, true, false, false, false, nil); err != nil { // no dead-letter arguments
		t.Fatal(err)
	}

	type call struct {
		attempt     int
		redelivered bool
	}
	var mu sync.Mutex
	var calls []call
	handle := func(ctx context.Context, d rabbit.Delivery) rabbit.Decision {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, call{d.Attempt, d.Redelivered})
		if len(calls) == 1 {
			return rabbit.RetryAfter(delay, "simulated transient failure")
		}
		return rabbit.Ack()
	}
	loop(t, func(ctx context.Context) {
		_ = p.conn.Consume(ctx, rabbit.ConsumeConfig{Queue: queue, Workers: 1, Log: quiet}, handle)
	})
	p.publish(t, "6f1c1b1e-9a55-4a53-9a0b-1d5b0c6c0f11")
	snapshot := func() []call {
		mu.Lock()
		defer mu.Unlock()
		return append([]call(nil), calls...)
	}

	// Two seconds in which the retry cannot be scheduled: the message must
	// not be handled again meanwhile.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && len(snapshot()) < 2; {
		time.Sleep(20 * time.Millisecond)
	}
	if got := snapshot(); len(got) != 1 {
		t.Fatalf("handled %d times while its retry could not be scheduled, want once (calls: %+v): an instant requeue", len(got), got)
	}
	if _, err := ch.QueueDelete(retryQueue, false, false, false); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 15*time.Second, "the message back through the delay path", func() bool { return len(snapshot()) >= 2 })
	if got := snapshot(); len(got) != 2 || got[1] != (call{attempt: 2, redelivered: false}) {
		t.Fatalf("calls %+v, want a first attempt and then attempt 2 from the retry queue (not a broker redelivery)", got)
	}
}

// A handler that panics on one message takes neither the process nor its
// worker down: the message goes back to its queue after each panic, the
// queue's delivery limit ends that, and the broker dead-letters it to
// <queue>.dead (which the inbox drains into dead_letters); the messages
// around it are processed by the same single worker.
func TestPanickingHandlerLeavesTheWorkerAlive(t *testing.T) {
	t.Parallel()
	p := newProbe(t, rabbit.Queue{DeliveryLimit: 2})
	q := p.queue
	const bad = "0d4e6a43-0c38-4c0e-8f43-3f3b2d7e9b01"
	var mu sync.Mutex
	handled := map[string]int{} // message id -> calls
	handle := func(_ context.Context, d rabbit.Delivery) rabbit.Decision {
		mu.Lock()
		handled[d.MessageId]++
		mu.Unlock()
		if d.MessageId == bad {
			panic("a handler bug on " + d.MessageId)
		}
		return rabbit.Ack()
	}
	calls := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return handled[id]
	}
	loop(t, func(ctx context.Context) {
		_ = p.conn.Consume(ctx, rabbit.ConsumeConfig{Queue: q.Name, Workers: 1, Log: quiet}, handle)
	})
	const before, after = "8a0f7f0e-4a4b-4d35-9a39-5f3a8e0c2a10", "8a0f7f0e-4a4b-4d35-9a39-5f3a8e0c2a11"
	p.publish(t, before)
	p.publish(t, bad)

	dead := rabbittest.Drain(t, q.DeadQueue(), 1, 30*time.Second)
	if len(dead) != 1 || dead[0].MessageId != bad {
		t.Fatalf("dead-lettered %d messages (%v), want the one that panics", len(dead), ids(dead))
	}
	if got, want := (rabbit.Delivery{Delivery: dead[0]}).DeathReason(), "delivery_limit on "+q.Name; got != want {
		t.Errorf("dead letter reason %q, want %q", got, want)
	}
	if n := calls(bad); n < 2 {
		t.Errorf("the panicking message was handled %d times before it was dead-lettered, want it returned and retried", n)
	}
	p.publish(t, after) // the one worker is still there
	testutil.WaitFor(t, 15*time.Second, "the message after the panicking one handled", func() bool { return calls(after) > 0 })
	if calls(before) != 1 || calls(after) != 1 {
		t.Errorf("the messages around the panicking one were handled %d and %d times, want once each", calls(before), calls(after))
	}
}

func ids(ds []amqp.Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.MessageId)
	}
	return out
}

// probe is a namespace of its own with one queue, "probe.events", bound to
// order.created, and a connection and a publisher to the test broker.
type probe struct {
	ns    rabbit.Namespace
	conn  *rabbit.Conn
	queue rabbit.Queue
	pub   *rabbit.Publisher
}

// newProbe declares the probe's queue with q's settings.
func newProbe(t *testing.T, q rabbit.Queue) *probe {
	t.Helper()
	p := &probe{ns: rabbittest.Namespace(t)}
	q.Name, q.Keys = "probe.events", []string{events.OrderCreated}
	topo := rabbittest.Topology(t, p.ns, q)
	p.conn = rabbittest.Conn(t, topo)
	p.queue = topo.Queues[0]
	p.pub = p.conn.NewPublisher()
	t.Cleanup(p.pub.Close)
	return p
}

// publish publishes an order.created event with id and waits for its
// confirm.
func (p *probe) publish(t *testing.T, id string) {
	t.Helper()
	msg := rabbit.FromEnvelope(p.ns.Exchange(), events.Envelope{EventID: id, Type: events.OrderCreated,
		AggregateID: 1, AggregateVersion: 1, SchemaVersion: 1, Payload: []byte(`{}`)})
	if err := p.pub.Publish(context.Background(), []rabbit.Message{msg}, 5*time.Second)[0]; err != nil {
		t.Fatal(err)
	}
}

// loop runs fn (a consume loop) until the test ends, then cancels its
// context and waits for it to return.
func loop(t *testing.T, fn func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
}
