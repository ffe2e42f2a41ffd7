// Package rabbitnodetest starts a private RabbitMQ node for one test and
// stops it when the test ends.
package rabbitnodetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/rabbitnode"
)

// Start starts a node named prefix<port> on a free port, in the test's
// temporary directory. Without RabbitMQ installed the test fails with a
// clear message; with -short it is skipped.
func Start(t testing.TB, prefix string) *rabbitnode.Node {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: starts a RabbitMQ node (run without -short)")
	}
	port, err := rabbitnode.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := rabbitnode.Start(ctx, rabbitnode.Config{Name: fmt.Sprintf("%s%d", prefix, port), Port: port, Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("a private RabbitMQ node is needed (RabbitMQ installed, see internal/rabbitnode): %v", err)
	}
	t.Cleanup(func() {
		if err := n.Stop(context.Background()); err != nil {
			t.Errorf("stop RabbitMQ node %s: %v", n.Name(), err)
		}
	})
	return n
}
