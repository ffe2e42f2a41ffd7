// Package orderhttp is the order service's HTTP API (docs/contract.md,
// "HTTP API").
package orderhttp

import (
	"log/slog"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/pkg/web"
	"github.com/relmsg/ordersaga/services/order/internal/orderapp"
)

// Routes lists every route of the order API.
func Routes(r chi.Router, app *orderapp.App, log *slog.Logger) {
	h, e := &handlers{app: app, inFlight: &web.InFlight{}}, edge(log)
	r.Post("/orders", e.Handle(h.create))             // header Idempotency-Key
	r.Get("/orders", e.Handle(h.list))                // ?status=&limit=&before=
	r.Get("/orders/{id}", e.Handle(h.get))            //
	r.Post("/orders/{id}/cancel", e.Handle(h.cancel)) // header Idempotency-Key
}

// AdminRoutes lists the order service's own operator routes, relative to
// /admin: service.Runtime's Router mounts them behind ADMIN_TOKEN, next to
// the messaging tables (outbox, inbox, dead letters).
func AdminRoutes(app *orderapp.App, log *slog.Logger) func(chi.Router) {
	h, e := &handlers{app: app}, edge(log)
	return func(r chi.Router) {
		r.Get("/reconciliation", e.Handle(h.reconciliationReport))   // ?limit=&order_id=: audit rows, newest first
		r.Post("/reconciliation/run", e.Handle(h.reconciliationRun)) // one pass now; answers its summary
		r.Get("/orders/{id}/timeline", e.Handle(h.timeline))         // the order across the three services, in time order
		r.Get("/deadlines", e.Handle(h.deadlines))                   // ?limit=: open orders by deadline (the timer table)
	}
}

// edge answers the errors the handlers return: httpError maps the order
// domain's, the rest is a logged 500.
func edge(log *slog.Logger) web.Edge { return web.Edge{Log: log, Map: httpError} }
