package e2e

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/relmsg/ordersaga/internal/rabbitnode"
	"github.com/relmsg/ordersaga/internal/rabbitnode/rabbitnodetest"
)

// early is TestScaleOutOnACluster's cluster, booting from the start of the
// process when the whole package runs (no -run, no -skip, not -short): the
// test waits for a parallel slot behind the package's other tests, and its
// three nodes boot meanwhile instead of after (the package's longest
// path). With -run the test boots its own, as any test does.
var early *rabbitnodetest.Early

func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Short() && flag.Lookup("test.run").Value.String() == "" && flag.Lookup("test.skip").Value.String() == "" &&
		flag.Lookup("test.list").Value.String() == "" {
		early = rabbitnodetest.StartEarly("e2ecl", 3)
	}
	code := m.Run()
	if early != nil {
		if err := early.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: stop the cluster:", err)
			code = max(code, 1)
		}
	}
	os.Exit(code)
}

// clusterNodes is the cluster of TestScaleOutOnACluster: the one booted
// early, or one of its own.
func clusterNodes(t *testing.T) []*rabbitnode.Node {
	t.Helper()
	if early != nil {
		return early.Nodes(t)
	}
	return rabbitnodetest.Cluster(t, "e2ecl", 3)
}
