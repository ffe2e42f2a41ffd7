package paymenthttp

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/internal/contract"
)

// TestRoutesAreInTheContract: every route of the payment service's API
// (routes.go) is an operation docs/openapi.yaml gives to it.
func TestRoutesAreInTheContract(t *testing.T) {
	r := chi.NewRouter()
	Routes(r, nil, nil, func(h http.Handler) http.Handler { return h }, nil)
	admin := chi.NewRouter()
	AdminRoutes(nil, nil)(admin)
	contract.WantRoutes(t, "payment", map[string]chi.Routes{"": r, "/admin": admin})
}
