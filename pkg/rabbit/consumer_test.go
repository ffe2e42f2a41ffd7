package rabbit_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// 不要无限立即 requeue: when the delayed copy of a failed message cannot be
// published (here its retry queue exists with other arguments, so declaring
// it fails), the message is not put back at the head of its queue to be
// redelivered at once. It stays with its consumer, unacked, while the
// retry is tried again; once the retry queue can be declared, the message
// comes back through the delay path as the next attempt.
func TestFailedRetrySchedulingIsNotAnInstantRequeue(t *testing.T) {
	t.Parallel()
	ns := rabbittest.Namespace(t)
	topo := rabbittest.Topology(t, ns, rabbit.Queue{Name: "probe.events", Keys: []string{events.OrderCreated}})
	conn := rabbittest.Conn(t, topo)
	queue := topo.Queues[0].Name
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = conn.Consume(ctx, rabbit.ConsumeConfig{Queue: queue, Workers: 1, Log: quiet}, handle)
	}()
	defer func() { cancel(); <-done }()
	pub := conn.NewPublisher()
	defer pub.Close()
	msg := rabbit.FromEnvelope(ns.Exchange(), events.Envelope{EventID: "6f1c1b1e-9a55-4a53-9a0b-1d5b0c6c0f11",
		Type: events.OrderCreated, AggregateID: 1, AggregateVersion: 1, SchemaVersion: 1, Payload: []byte(`{}`)})
	if err := pub.Publish(context.Background(), []rabbit.Message{msg}, 5*time.Second)[0]; err != nil {
		t.Fatal(err)
	}
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
	deadline := time.Now().Add(15 * time.Second)
	for len(snapshot()) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the message never came back through the delay path")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := snapshot(); len(got) != 2 || got[1] != (call{attempt: 2, redelivered: false}) {
		t.Fatalf("calls %+v, want a first attempt and then attempt 2 from the retry queue (not a broker redelivery)", got)
	}
}
