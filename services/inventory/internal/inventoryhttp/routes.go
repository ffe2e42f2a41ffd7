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
