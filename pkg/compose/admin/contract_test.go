package admin_test

import (
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/internal/contract"
	"github.com/relmsg/ordersaga/pkg/compose/admin"
)

// TestRoutesAreInTheContract: every /admin route of the messaging tables
// is an operation docs/openapi.yaml gives to each service.
func TestRoutesAreInTheContract(t *testing.T) {
	r := chi.NewRouter()
	(&admin.Handler{}).Routes(r)
	for _, svc := range []string{"order", "inventory", "payment"} {
		contract.WantRoutes(t, svc, map[string]chi.Routes{"/admin": r})
	}
}
