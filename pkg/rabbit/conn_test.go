package rabbit_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/internal/rabbitnode"
	"github.com/relmsg/ordersaga/internal/rabbitnode/rabbitnodetest"
	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// TestConnMovesToTheNextNode runs a connection over two separate nodes
// (AMQP_URL "A,B") and kills the one it is on, twice. Each time it moves to
// the next address, wrapping around from B back to A; it declares the
// topology there (B has never seen the queue before) and the consume loop
// resumes. A publish whose confirm was pending when its node died is
// reported as not confirmed, never as sent; sent again with the same
// message id, it is delivered.
func TestConnMovesToTheNextNode(t *testing.T) {
	nodes := rabbitnodetest.Nodes(t, "conntest", 2)
	a, b := nodes[0], nodes[1]
	topo := rabbit.Topology{Exchange: "t.events", DeadLetterExchange: "t.dlx",
		Queues: []rabbit.Queue{{Name: "t.work", Keys: []string{"work"}}}}
	c := rabbit.New(a.URL()+","+b.URL(), topo, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	t.Cleanup(func() { cancel(); loops.Wait() })
	loops.Go(func() { _ = c.Run(ctx) })

	var mu sync.Mutex
	got := map[string]string{} // message id -> node that delivered it
	loops.Go(func() {
		_ = c.Consume(ctx, rabbit.ConsumeConfig{Queue: "t.work"}, func(_ context.Context, d rabbit.Delivery) rabbit.Decision {
			mu.Lock()
			got[d.MessageId] = c.Address()
			mu.Unlock()
			return rabbit.Ack()
		})
	})
	onNode := func(n *rabbitnode.Node) {
		t.Helper()
		want := "127.0.0.1:" + strconv.Itoa(n.Port())
		testutil.WaitFor(t, 30*time.Second, "the connection on "+want, func() bool { return c.Address() == want })
	}
	pub := c.NewPublisher()
	defer pub.Close()
	publish := func(id string) error {
		msg := rabbit.Message{Exchange: "t.events", RoutingKey: "work",
			Publishing: amqp.Publishing{MessageId: id, Body: []byte(id)}}
		return pub.Publish(ctx, []rabbit.Message{msg}, 20*time.Second)[0]
	}
	delivered := func(id string, n *rabbitnode.Node) {
		t.Helper()
		want := "127.0.0.1:" + strconv.Itoa(n.Port())
		testutil.WaitFor(t, 30*time.Second, id+" delivered from "+want, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return got[id] == want
		})
	}

	onNode(a) // the first address that answers
	if err := publish("m1"); err != nil {
		t.Fatalf("m1 on A: %v", err)
	}
	delivered("m1", a)

	// A freezes (SIGSTOP) before m2 reaches it and dies (SIGKILL) with m2
	// unconfirmed: the broker may or may not have it, so it must not count
	// as sent.
	if err := syscall.Kill(a.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	pending := make(chan error, 1)
	go func() { pending <- publish("m2") }()
	time.Sleep(300 * time.Millisecond) // m2 is on the wire, its confirm pending
	if err := syscall.Kill(a.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-pending:
		if err == nil {
			t.Fatal("m2, unconfirmed when its node died, was reported confirmed")
		}
		if !errors.Is(err, rabbit.ErrNacked) {
			t.Logf("m2: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the publish pending on the killed node never returned")
	}

	onNode(b)                                 // the next address
	for _, id := range []string{"m2", "m3"} { // m2 again, as the outbox re-sends it
		if err := publish(id); err != nil {
			t.Fatalf("%s on B: %v", id, err)
		}
		delivered(id, b)
	}

	// A comes back, B dies: the connection wraps around to A.
	if err := a.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(b.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	onNode(a)
	if err := publish("m4"); err != nil {
		t.Fatalf("m4 on A again: %v", err)
	}
	delivered("m4", a)
}
