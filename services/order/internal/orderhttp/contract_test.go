package orderhttp

import (
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/internal/contract"
)

// TestRoutesAreInTheContract: every route of the order service's API
// (routes.go) is an operation docs/openapi.yaml gives to it.
func TestRoutesAreInTheContract(t *testing.T) {
	r := chi.NewRouter()
	Routes(r, nil, nil)
	admin := chi.NewRouter()
	AdminRoutes(nil, nil)(admin)
	contract.WantRoutes(t, "order", map[string]chi.Routes{"": r, "/admin": admin})
}
