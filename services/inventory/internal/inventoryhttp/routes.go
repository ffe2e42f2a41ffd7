// Package inventoryhttp is the inventory service's HTTP API (SPEC section 7).
package inventoryhttp

import (
	"log/slog"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/services/inventory/internal/inventoryapp"
)

// Routes lists every route of the inventory API.
func Routes(r chi.Router, app *inventoryapp.App, log *slog.Logger) {
	h := &handlers{app: app, log: log}
	r.Get("/stock", h.listStock)
	r.Get("/stock/{sku}", h.getStock)
	r.Post("/stock/{sku}/receipts", h.receive)
	r.Get("/reservations/{order_id}", h.getReservation)
}

// AdminRoutes lists the inventory's own operator routes. service.Runtime's
// Router mounts them under /admin, behind ADMIN_TOKEN, next to the
// messaging tables.
func AdminRoutes(app *inventoryapp.App, log *slog.Logger) func(chi.Router) {
	h := &handlers{app: app, log: log}
	return func(r chi.Router) {
		r.Get("/gaps", h.listGaps)                 // ?open=true&aggregate_id=&limit=
		r.Post("/gaps/{id}/resolve", h.resolveGap) // {"resolution":"why the missing event will not come"}
	}
}
