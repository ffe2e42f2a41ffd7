package orderapp_test

import (
	"testing"

	"github.com/relmsg/ordersaga/pkg/inbox/batch/batchtest"
)

// TestMain sets the differential tests' number of checks for the suite
// (-rapid.checks on the command line runs more).
func TestMain(m *testing.M) { batchtest.Main(m, 40) }
