// Package rabbitnodetest starts private RabbitMQ nodes for one test and
// stops them, by pid, when the test ends.
package rabbitnodetest

import (
	"context"
	"errors"
	"fmt"
	"os"
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
	nodes, err := boot(t.TempDir(), prefix, n, cluster)
	t.Cleanup(func() {
		for _, err := range stop(nodes) {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return nodes
}

// boot starts n nodes (a cluster or separate ones) in dir; the nodes it
// returns are those that started, to be stopped whatever the error.
func boot(dir, prefix string, n int, cluster bool) ([]*rabbitnode.Node, error) {
	var cfgs []rabbitnode.Config
	var ports []int
	for len(ports) < n {
		port, err := rabbitnode.FreePort()
		if err != nil {
			return nil, err
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
		err = errors.Join(errs...)
	}
	if err != nil {
		err = fmt.Errorf("private RabbitMQ nodes are needed (RabbitMQ installed, see internal/rabbitnode): %w", err)
	}
	return slices.DeleteFunc(nodes, func(n *rabbitnode.Node) bool { return n == nil }), err
}

// stop stops every node by pid and returns what failed.
func stop(nodes []*rabbitnode.Node) []error {
	var errs []error
	for _, node := range nodes {
		if err := node.Stop(context.Background()); err != nil {
			errs = append(errs, fmt.Errorf("stop RabbitMQ node %s: %w", node.Name(), err))
		}
	}
	return errs
}

// Early is a cluster that boots in the background from the start of a
// test process, for a test that asks for it later: a package's TestMain
// starts it (StartEarly) so that its boot runs beside the package's other
// tests instead of after the test's wait for a parallel slot, and stops it
// after m.Run.
type Early struct {
	done  chan struct{}
	dir   string
	nodes []*rabbitnode.Node
	err   error
}

// StartEarly starts booting a cluster of n nodes named prefix<port>.
func StartEarly(prefix string, n int) *Early {
	e := &Early{done: make(chan struct{})}
	go func() {
		defer close(e.done)
		if e.dir, e.err = os.MkdirTemp("", prefix+"-"); e.err == nil {
			e.nodes, e.err = boot(e.dir, prefix, n, true)
		}
	}()
	return e
}

// Nodes waits for the boot and returns the cluster's nodes; a boot that
// failed fails the test.
func (e *Early) Nodes(t testing.TB) []*rabbitnode.Node {
	t.Helper()
	<-e.done
	if e.err != nil {
		t.Fatal(e.err)
	}
	return e.nodes
}

// Stop waits for the boot, stops the nodes and removes their files; it
// returns what failed.
func (e *Early) Stop() error {
	<-e.done
	errs := stop(e.nodes)
	if e.dir != "" {
		errs = append(errs, os.RemoveAll(e.dir))
	}
	return errors.Join(errs...)
}
