package e2e

import (
	"testing"

	"github.com/relmsg/ordersaga/internal/rabbitnode/rabbitnodetest"
)

// cluster is TestScaleOutOnACluster's: it boots from the start of a whole
// run while the test waits for a parallel slot (rabbitnodetest.Early).
var cluster = rabbitnodetest.Later("e2ecl", 3)

func TestMain(m *testing.M) { rabbitnodetest.Main(m, cluster) }
