package inventoryhttp

import (
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/internal/contract"
)

// TestRoutesAreInTheContract: every route of the inventory service's API
// (routes.go, and wrongway.go's demo route) is an operation docs/openapi.yaml gives to it.
func TestRoutesAreInTheContract(t *testing.T) {
	r := chi.NewRouter()
	Routes(r, nil, nil)
	DemoRoutes(r, nil, nil)
	admin := chi.NewRouter()
	AdminRoutes(nil, nil)(admin)
	contract.WantRoutes(t, "inventory", map[string]chi.Routes{"": r, "/admin": admin})
}
