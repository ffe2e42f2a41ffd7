package paymentbindings

import (
	"testing"

	"github.com/relmsg/ordersaga/internal/contract"
)

// TestBindingsAreTheContracts: every queue this service declares, and the
// routing keys bound to it, are the ones docs/asyncapi.yaml lists.
func TestBindingsAreTheContracts(t *testing.T) {
	diffs, err := contract.TopologyMismatches(Topology(""))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Error(d)
	}
}
