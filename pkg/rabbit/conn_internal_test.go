package rabbit

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/internal/testutil"
)

// testURL is the broker of the integration tests (rabbittest.URL, which
// this package's own tests cannot import).
func testURL() string {
	if u := os.Getenv("TEST_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// A channel asked of a connection that has since been replaced (Channel
// read it just before a failover) finds it closed. Marking that old one
// down must leave the new connection alone: otherwise the Conn reports
// itself down while Run waits on a healthy connection, and everything that
// waits for it (consumers, the dispatcher, /readyz) waits for good.
func TestLosingAReplacedConnectionKeepsTheCurrentOne(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs RabbitMQ (run without -short)")
	}
	t.Parallel()
	ns := fmt.Sprintf("t-conn-%d.", time.Now().UnixNano())
	topo := Topology{Exchange: ns + "events", DeadLetterExchange: ns + "dlx"}
	c := New(testURL(), topo, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if conn, err := amqp.Dial(testURL()); err == nil {
			_ = topo.Delete(conn, 0)
			_ = conn.Close()
		}
	})
	wg.Go(func() { _ = c.Run(ctx) })
	current := func() *amqp.Connection {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.conn
	}
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	defer wcancel()
	if err := c.WaitConnected(wctx); err != nil {
		t.Fatalf("RabbitMQ at %s is required for this test: %v", testURL(), err)
	}
	old := current()

	// A failover: the old connection closes, Run connects again.
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 15*time.Second, "Run to connect again after the connection closed", func() bool {
		return current() != nil && current() != old
	})

	// A late Channel call on the old connection.
	if _, err := c.channelOn(old); err == nil {
		t.Fatal("a channel opened on a closed connection")
	}
	if !c.Connected() {
		t.Error("the Conn reports itself down after a replaced connection was lost")
	}
	if err := c.WaitConnected(wctx); err != nil {
		t.Fatalf("WaitConnected after a replaced connection was lost: %v", err)
	}
	ch, err := c.Channel(wctx)
	if err != nil {
		t.Fatalf("Channel: %v", err)
	}
	_ = ch.Close()
}
