package orderbindings

import (
	"testing"

	"github.com/relmsg/ordersaga/internal/contract"
)

// TestBindingsAreTheContracts: every queue this service declares, and the
// routing keys bound to it, are the ones docs/asyncapi.yaml lists.
func TestBindingsAreTheContracts(t *testing.T) {
	contract.WantTopology(t, Topology(""))
}
