package rabbit_test

import (
	"testing"

	"github.com/relmsg/ordersaga/internal/rabbitnode/rabbitnodetest"
)

// cluster is TestRetryOutlivesTheNodeHoldingIt's: it boots from the start
// of a whole run while the test waits for a parallel slot.
var cluster = rabbitnodetest.Later("rtretry", 3)

func TestMain(m *testing.M) { rabbitnodetest.Main(m, cluster) }
