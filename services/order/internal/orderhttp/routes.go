// Package orderhttp is the order service's HTTP API (SPEC section 7).
package orderhttp

import (
	"log/slog"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/services/order/internal/orderapp"
)

// Routes lists every route of the order API.
func Routes(r chi.Router, app *orderapp.App, log *slog.Logger) {
	h := &handlers{app: app, log: log}
	r.Post("/orders", h.create)
	r.Get("/orders", h.list)
	r.Get("/orders/{id}", h.get)
	r.Post("/orders/{id}/cancel", h.cancel)
}
