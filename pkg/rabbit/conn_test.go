package rabbit_test

import (
	"context"
	"errors"
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
	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
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
	h := startHopping(t, a.URL()+","+b.URL())

	h.onNode(t, a) // the first address that answers
	if err := h.publish("m1"); err != nil {
		t.Fatalf("m1 on A: %v", err)
	}
	h.delivered(t, "m1", a)

	h.killWithAPublishPending(t, a, "m2")
	h.onNode(t, b)                            // the next address
	for _, id := range []string{"m2", "m3"} { // m2 again, as the outbox re-sends it
		if err := h.publish(id); err != nil {
			t.Fatalf("%s on B: %v", id, err)
		}
		h.delivered(t, id, b)
	}

	// A comes back, B dies: the connection wraps around to A.
	if err := a.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(b.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.onNode(t, a)
	if err := h.publish("m4"); err != nil {
		t.Fatalf("m4 on A again: %v", err)
	}
	h.delivered(t, "m4", a)
}

// hopping is a connection over several nodes, a publisher on it and a
// consume loop that records which node delivered each message.
type hopping struct {
	c   *rabbit.Conn
	pub *rabbit.Publisher
	mu  sync.Mutex
	got map[string]string // message id -> node that delivered it
}

// startHopping runs a connection to urls (AMQP_URL's list) and its consume
// loop until the test ends.
func startHopping(t *testing.T, urls string) *hopping {
	t.Helper()
	topo := rabbit.Topology{Exchange: "t.events", DeadLetterExchange: "t.dlx",
		Queues: []rabbit.Queue{{Name: "t.work", Keys: []string{"work"}}}}
	h := &hopping{c: rabbit.New(urls, topo, slog.New(slog.DiscardHandler)), got: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	t.Cleanup(func() { cancel(); loops.Wait() })
	loops.Go(func() { _ = h.c.Run(ctx) })
	loops.Go(func() {
		_ = h.c.Consume(ctx, rabbit.ConsumeConfig{Queue: "t.work"}, func(_ context.Context, d rabbit.Delivery) rabbit.Decision {
			h.mu.Lock()
			h.got[d.MessageId] = h.c.Address()
			h.mu.Unlock()
			return rabbit.Ack()
		})
	})
	h.pub = h.c.NewPublisher(rabbit.AfterSendFailpoint(afterSend))
	t.Cleanup(h.pub.Close)
	return h
}

func address(n *rabbitnode.Node) string { return "127.0.0.1:" + strconv.Itoa(n.Port()) }

// onNode waits until the connection is on n.
func (h *hopping) onNode(t *testing.T, n *rabbitnode.Node) {
	t.Helper()
	want := address(n)
	testutil.WaitFor(t, 30*time.Second, "the connection on "+want, func() bool { return h.c.Address() == want })
}

// publish publishes the message id and waits for its confirm.
func (h *hopping) publish(id string) error { return h.publishCtx(context.Background(), id) }

func (h *hopping) publishCtx(ctx context.Context, id string) error {
	msg := rabbit.Message{Exchange: "t.events", RoutingKey: "work",
		Publishing: amqp.Publishing{MessageId: id, Body: []byte(id)}}
	return h.pub.Publish(ctx, []rabbit.Message{msg}, 20*time.Second)[0]
}

// afterSend is the hopping publisher's failpoint between a send and its
// confirm.
const afterSend = "conntest.after-send"

// delivered waits until the message id is delivered from n.
func (h *hopping) delivered(t *testing.T, id string, n *rabbitnode.Node) {
	t.Helper()
	want := address(n)
	testutil.WaitFor(t, 30*time.Second, id+" delivered from "+want, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.got[id] == want
	})
}

// killWithAPublishPending freezes n (SIGSTOP) before the message id reaches
// it and kills it (SIGKILL) with id unconfirmed: the broker may or may not
// have it, so it must not count as sent.
func (h *hopping) killWithAPublishPending(t *testing.T, n *rabbitnode.Node, id string) {
	t.Helper()
	if err := syscall.Kill(n.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The publish stops after sending, before awaiting its confirm: the
	// message is on the wire, its confirm pending, when the node dies (a
	// sleep instead let a slow goroutine publish after the kill, to the
	// next node, and be confirmed there).
	sent := failpoint.NewRegistry()
	gate := sent.Pause(afterSend, 1)
	defer gate.Release()
	pending := make(chan error, 1)
	go func() { pending <- h.publishCtx(failpoint.WithRegistry(context.Background(), sent), id) }()
	select {
	case <-gate.Reached():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s was never sent", id)
	}
	if err := syscall.Kill(n.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	gate.Release()
	select {
	case err := <-pending:
		if err == nil {
			t.Fatalf("%s, unconfirmed when its node died, was reported confirmed", id)
		}
		if !errors.Is(err, rabbit.ErrNacked) {
			t.Logf("%s: %v", id, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the publish pending on the killed node never returned")
	}
}
