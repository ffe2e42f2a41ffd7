package e2e

import (
	"flag"
	"testing"

	"github.com/relmsg/ordersaga/internal/rabbitnode/rabbitnodetest"
)

// cluster is TestScaleOutOnACluster's, booting from the start of the
// process when the whole package runs: the test waits for a parallel slot
// behind the package's other tests, and its three nodes boot meanwhile
// instead of after (the package's longest path).
var cluster *rabbitnodetest.Early

func TestMain(m *testing.M) {
	flag.Parse()
	cluster = rabbitnodetest.StartEarly("e2ecl", 3)
	rabbitnodetest.Exit(m, cluster)
}
