// Package rabbittest connects integration tests to the real RabbitMQ with a
// namespace of their own, and deletes what they declared when they end.
package rabbittest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// URL is the broker the tests use: TEST_AMQP_URL or the local development
// broker.
func URL() string {
	if u := os.Getenv("TEST_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// Namespace returns a fresh namespace ("t-<hex>.") for one test.
func Namespace(t testing.TB) rabbit.Namespace {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs RabbitMQ (run without -short)")
	}
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return rabbit.Namespace("t-" + hex.EncodeToString(b) + ".")
}

// Topology builds a test topology in namespace ns with the given queues
// (names are prefixed here) and deletes it at cleanup.
func Topology(t testing.TB, ns rabbit.Namespace, queues ...rabbit.Queue) rabbit.Topology {
	t.Helper()
	topo := ns.Topology(queues...)
	Cleanup(t, topo)
	return topo
}

// Cleanup deletes the topologies' queues and exchanges when the test
// ends, over one connection.
func Cleanup(t testing.TB, topos ...rabbit.Topology) {
	t.Cleanup(func() {
		conn := Dial(t)
		defer conn.Close()
		for _, topo := range topos {
			if err := topo.Delete(conn, 12); err != nil {
				t.Logf("delete test topology: %v", err)
			}
		}
	})
}

// Dial opens a plain AMQP connection for the test to inspect queues with.
// A broker that cannot be reached fails the test.
func Dial(t testing.TB) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(URL())
	if err != nil {
		t.Fatalf("RabbitMQ at %s is required for this test (scripts/test.sh starts it): %v", URL(), err)
	}
	return conn
}

// Channel runs fn on a fresh channel of a plain connection (Dial), for
// what the product's connection does not do (purge, inspect, declare odd
// queues), and closes both before it returns. An error from fn fails the
// test.
func Channel(t testing.TB, fn func(ch *amqp.Channel) error) {
	t.Helper()
	conn := Dial(t)
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := fn(ch); err != nil {
		t.Fatal(err)
	}
}

// Inspect is queue as the broker has it now (a passive declare): its
// ready messages and its consumers. A queue that does not exist fails the
// test.
func Inspect(t testing.TB, queue string) amqp.Queue {
	t.Helper()
	var q amqp.Queue
	Channel(t, func(ch *amqp.Channel) (err error) {
		q, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		return err
	})
	return q
}

// Conn starts a recovering rabbit.Conn for topo, waits until it is
// connected and stops it at cleanup.
func Conn(t testing.TB, topo rabbit.Topology) *rabbit.Conn {
	t.Helper()
	c := rabbit.New(URL(), topo, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	defer wcancel()
	if err := c.WaitConnected(wctx); err != nil {
		t.Fatalf("RabbitMQ at %s is required for this test: %v", URL(), err)
	}
	return c
}

// CloseConnections makes the broker close every client connection whose
// connection_name contains substr (pkg/rabbit names connections after the
// process and the exchange, so a test's namespace selects its own
// connections only). This is what clients see when the broker restarts or
// an operator kills a connection. It returns how many were closed.
func CloseConnections(t testing.TB, substr string) int {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "-q", "list_connections", "pid", "client_properties").CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl list_connections: %v\n%s", err, out)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		pid, props, ok := strings.Cut(line, "\t")
		if !ok || !strings.Contains(props, substr) {
			continue
		}
		if out, err := exec.Command("rabbitmqctl", "-q", "close_connection", pid, "test: simulated broker-side close").CombinedOutput(); err != nil {
			t.Fatalf("rabbitmqctl close_connection %s: %v\n%s", pid, err, out)
		}
		n++
	}
	return n
}

// Drain reads every message currently in queue (basic.get, acked) and
// returns them. It waits up to wait for at least want messages.
func Drain(t testing.TB, queue string, want int, wait time.Duration) []amqp.Delivery {
	t.Helper()
	var got []amqp.Delivery
	deadline := time.Now().Add(wait)
	Channel(t, func(ch *amqp.Channel) error {
		for {
			d, ok, err := ch.Get(queue, false)
			if err != nil {
				return fmt.Errorf("get from %s: %w", queue, err)
			}
			if ok {
				_ = d.Ack(false)
				got = append(got, d)
				continue
			}
			if len(got) >= want || time.Now().After(deadline) {
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	return got
}
