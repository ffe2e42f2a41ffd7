// Package inventoryhttp is the inventory service's HTTP API
// (docs/contract.md, "HTTP API").
package inventoryhttp

import (
	"log/slog"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/pkg/web"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventoryapp"
)

// Routes lists every route of the inventory API.
func Routes(r chi.Router, app *inventoryapp.App, log *slog.Logger) {
	h, e := &handlers{app: app, inFlight: &web.InFlight{}}, edge(log)
	r.Get("/stock", e.Handle(h.listStock))
	r.Get("/stock/{sku}", e.Handle(h.getStock))
	r.Post("/stock/{sku}/receipts", e.Handle(h.receive)) // header Idempotency-Key
	r.Get("/reservations/{order_id}", e.Handle(h.getReservation))
}

// AdminRoutes lists the inventory's own operator routes. service.Runtime's
// Router mounts them under /admin, behind ADMIN_TOKEN, next to the
// messaging tables.
func AdminRoutes(app *inventoryapp.App, log *slog.Logger) func(chi.Router) {
	h, e := &handlers{app: app}, edge(log)
	return func(r chi.Router) {
		r.Get("/gaps", e.Handle(h.listGaps))                 // ?open=true&aggregate_id=&limit=
		r.Post("/gaps/{id}/resolve", e.Handle(h.resolveGap)) // {"resolution":"why the missing event will not come"}
	}
}

// edge answers the errors the handlers return: httpError maps the
// inventory domain's, the rest is a logged 500.
func edge(log *slog.Logger) web.Edge { return web.Edge{Log: log, Map: httpError} }
