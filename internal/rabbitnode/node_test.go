package rabbitnode_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/internal/rabbitnode/rabbitnodetest"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

// TestPrivateNodeCutsOnlyItsOwnClients starts a node and checks what the
// chaos run relies on: it serves AMQP on its own port; closing its
// connections and restarting its application cut its clients and keep its
// durable queues, while a client of the system broker stays connected; the
// node ends by its pid.
func TestPrivateNodeCutsOnlyItsOwnClients(t *testing.T) {
	n := rabbitnodetest.Start(t, "rntest")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	system := rabbittest.Dial(t) // the system broker, 127.0.0.1:5672
	defer system.Close()
	systemClosed := system.NotifyClose(make(chan *amqp.Error, 1))

	dial := func() (*amqp.Connection, chan *amqp.Error) {
		t.Helper()
		c, err := amqp.Dial(n.URL())
		if err != nil {
			t.Fatalf("dial %s: %v", n.URL(), err)
		}
		return c, c.NotifyClose(make(chan *amqp.Error, 1))
	}
	conn, closed := dial()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("rntest.durable", true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatalf("declare a quorum queue: %v", err)
	}

	got, err := n.CloseAllConnections(ctx, "test: close")
	if err != nil {
		t.Fatal(err)
	}
	if got != 1 {
		t.Errorf("CloseAllConnections closed %d connections, want 1 (ours)", got)
	}
	waitClosed(t, closed, "our connection after close_all_connections")

	conn, closed = dial()
	if err := n.StopApp(ctx); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, closed, "our connection after stop_app")
	if c, err := amqp.Dial(n.URL()); err == nil {
		c.Close()
		t.Fatal("the node accepted a connection with its application stopped")
	}
	if err := n.StartApp(ctx); err != nil {
		t.Fatal(err)
	}
	conn, _ = dial()
	ch, err = conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclarePassive("rntest.durable", true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Errorf("the durable queue is gone after the restart: %v", err)
	}
	conn.Close()

	select {
	case e := <-systemClosed:
		t.Errorf("the system broker's connection was closed: %v", e)
	default:
	}
	if system.IsClosed() {
		t.Error("the system broker's connection was closed")
	}

	pid := n.PID()
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", n.Port()), time.Second); err == nil {
		c.Close()
		t.Errorf("port %d still answers after Stop (pid %d)", n.Port(), pid)
	}
}

func waitClosed(t *testing.T, closed chan *amqp.Error, what string) {
	t.Helper()
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: still open after 15s", what)
	}
}
