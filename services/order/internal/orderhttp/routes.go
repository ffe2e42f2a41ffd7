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

// AdminRoutes lists the order service's own operator routes, relative to
// /admin: service.Runtime's Router mounts them behind ADMIN_TOKEN, next to
// the messaging tables (outbox, inbox, dead letters).
func AdminRoutes(app *orderapp.App, log *slog.Logger) func(chi.Router) {
	h := &handlers{app: app, log: log}
	return func(r chi.Router) {
		r.Get("/reconciliation", h.reconciliationReport)   // ?limit=&order_id=: audit rows, newest first
		r.Post("/reconciliation/run", h.reconciliationRun) // one pass now; answers its summary
		r.Get("/orders/{id}/timeline", h.timeline)         // the order across the three services, in time order
		r.Get("/deadlines", h.deadlines)                   // ?limit=: open orders by deadline (the timer table)
	}
}
