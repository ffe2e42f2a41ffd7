// Package rabbitnodetest starts private RabbitMQ nodes for one test and
// stops them, by pid, when the test ends.
package rabbitnodetest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/rabbitnode"
)

// Start starts a node named prefix<port> on a free port, in the test's
// temporary directory. Without RabbitMQ installed the test fails with a
// clear message; with -short it is skipped.
func Start(t testing.TB, prefix string) *rabbitnode.Node {
	t.Helper()
	return start(t, prefix, 1, false)[0]
}

// Nodes starts n separate nodes at once (each its own broker, like
// Start).
func Nodes(t testing.TB, prefix string, n int) []*rabbitnode.Node {
	t.Helper()
	return start(t, prefix, n, false)
}

// Cluster starts a cluster of n nodes (rabbitnode.StartCluster) on free
// ports; the first node is the one the others joined.
func Cluster(t testing.TB, prefix string, n int) []*rabbitnode.Node {
	t.Helper()
	return start(t, prefix, n, true)
}

func start(t testing.TB, prefix string, n int, cluster bool) []*rabbitnode.Node {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: starts RabbitMQ nodes (run without -short)")
	}
	var cfgs []rabbitnode.Config
	var ports []int
	dir := t.TempDir()
	for len(ports) < n {
		port, err := rabbitnode.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(ports, port) {
			continue
		}
		ports = append(ports, port)
		name := fmt.Sprintf("%s%d", prefix, port)
		cfgs = append(cfgs, rabbitnode.Config{Name: name, Port: port, Dir: filepath.Join(dir, name)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var nodes []*rabbitnode.Node
	var err error
	if cluster {
		nodes, err = rabbitnode.StartCluster(ctx, cfgs)
	} else {
		nodes = make([]*rabbitnode.Node, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, cfg := range cfgs {
			wg.Go(func() { nodes[i], errs[i] = rabbitnode.Start(ctx, cfg) })
		}
		wg.Wait()
		for i, e := range errs {
			if e != nil && err == nil {
				err = e
			}
			if e != nil {
				nodes[i] = nil
			}
		}
	}
	t.Cleanup(func() {
		for _, node := range nodes {
			if node == nil {
				continue
			}
			if err := node.Stop(context.Background()); err != nil {
				t.Errorf("stop RabbitMQ node %s: %v", node.Name(), err)
			}
		}
	})
	if err != nil {
		t.Fatalf("private RabbitMQ nodes are needed (RabbitMQ installed, see internal/rabbitnode): %v", err)
	}
	return nodes
}
