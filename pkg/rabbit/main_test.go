package rabbit_test

import (
	"flag"
	"testing"

	"github.com/relmsg/ordersaga/internal/rabbitnode/rabbitnodetest"
)

// cluster is TestRetryOutlivesTheNodeHoldingIt's, booting from the start
// of the process when the whole package runs, while the test waits for a
// parallel slot (rabbitnodetest.Early).
var cluster *rabbitnodetest.Early

func TestMain(m *testing.M) {
	flag.Parse()
	cluster = rabbitnodetest.StartEarly("rtretry", 3)
	rabbitnodetest.Exit(m, cluster)
}
