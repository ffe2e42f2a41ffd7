package rabbit_test

import (
	"context"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

// A channel asked of a connection that has since been replaced (Channel
// read it just before a failover) finds it closed. Marking that old one
// down must leave the new connection alone: otherwise the Conn reports
// itself down while Run waits on a healthy connection, and everything that
// waits for it (consumers, the dispatcher, /readyz) waits for good.
func TestLosingAReplacedConnectionKeepsTheCurrentOne(t *testing.T) {
	t.Parallel()
	c := rabbittest.Conn(t, rabbittest.Topology(t, rabbittest.Namespace(t)))
	wctx, wcancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer wcancel()
	current := c.CurrentConn
	old := current()

	// A failover: the old connection closes, Run connects again.
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 15*time.Second, "Run to connect again after the connection closed", func() bool {
		return current() != nil && current() != old
	})

	// A late Channel call on the old connection.
	if _, err := c.ChannelOn(old); err == nil {
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
