package inventoryapp_test

import (
	"flag"
	"os"
	"testing"

	"github.com/relmsg/ordersaga/pkg/inbox/batch/batchtest"
)

// TestMain sets the differential tests' number of checks for the suite
// (-rapid.checks on the command line runs more).
func TestMain(m *testing.M) {
	flag.Parse()
	batchtest.DefaultChecks(40)
	os.Exit(m.Run())
}
