// Package rabbitnodetest starts private RabbitMQ nodes for one test and
// stops them, by pid, when the test ends.
package rabbitnodetest

import (
	"context"
	"errors"
	"flag"
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
		// A node that boots beside the rest of the suite can take more than
		// the default minute on two busy cores; the whole start is bounded
		// by the three minutes below.
		cfgs = append(cfgs, rabbitnode.Config{Name: name, Port: port, Dir: filepath.Join(dir, name), BootTimeout: 3 * time.Minute})
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
// test process, for a test that asks for it later (Nodes): declared with
// Later, booted by Main (the package's TestMain) when the whole package
// runs (no -run, -skip, -list, not -short), so that its boot runs beside
// the package's other tests instead of after the test's wait for a
// parallel slot. Otherwise Nodes boots the test's own, as Cluster does.
type Early struct {
	prefix string
	n      int
	done   chan struct{} // nil: not booting early
	dir    string
	nodes  []*rabbitnode.Node
	err    error
}

// Later declares a cluster of n nodes named prefix<port> for Main to boot.
func Later(prefix string, n int) *Early { return &Early{prefix: prefix, n: n} }

// Main is a TestMain: it boots the clusters early when the whole package
// runs, runs the tests, stops the clusters, removes their files and exits
// with the tests' code (1 if a cluster did not stop).
func Main(m *testing.M, clusters ...*Early) {
	flag.Parse()
	if !testing.Short() && !flagSet("test.run") && !flagSet("test.skip") && !flagSet("test.list") {
		for _, e := range clusters {
			e.start()
		}
	}
	code := m.Run()
	for _, e := range clusters {
		if err := e.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop the early RabbitMQ cluster:", err)
			code = max(code, 1)
		}
	}
	os.Exit(code)
}

func flagSet(name string) bool {
	f := flag.Lookup(name)
	return f != nil && f.Value.String() != ""
}

func (e *Early) start() {
	e.done = make(chan struct{})
	go func() {
		defer close(e.done)
		if e.dir, e.err = os.MkdirTemp("", e.prefix+"-"); e.err == nil {
			e.nodes, e.err = boot(e.dir, e.prefix, e.n, true)
		}
	}()
}

func (e *Early) stop() error {
	if e.done == nil {
		return nil
	}
	<-e.done
	errs := stop(e.nodes)
	if e.dir != "" {
		errs = append(errs, os.RemoveAll(e.dir))
	}
	return errors.Join(errs...)
}

// Nodes returns the cluster's nodes, waiting for the early boot, or boots
// one for the test (Cluster). A boot that failed fails the test.
func (e *Early) Nodes(t testing.TB) []*rabbitnode.Node {
	t.Helper()
	if e.done == nil {
		return Cluster(t, e.prefix, e.n)
	}
	<-e.done
	if e.err != nil {
		t.Fatal(e.err)
	}
	return e.nodes
}
