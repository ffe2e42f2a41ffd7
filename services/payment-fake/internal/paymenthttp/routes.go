// Package paymenthttp is the payment service's HTTP API (docs/contract.md):
// the payment of an order and what became of its charge, a read-only
// pass-through to the fake PSP's books under /psp, and the operator's view
// of what is parked (under /admin, behind the admin token).
package paymenthttp

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/pkg/endpoints"
	"github.com/relmsg/ordersaga/pkg/web"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentapp"
)

// Outcome rate: GET /payments/{id}/outcome may ask the PSP on every call,
// so each instance answers at most outcomeBurst at once and outcomeRate a
// second after that (the order's deadline sweep asks for at most
// DEADLINE_SWEEP_BATCH, 100, orders a round).
const (
	outcomeRate  = 50
	outcomeBurst = 200
)

// Routes lists every public route of the payment service. psp is the PSP
// process's addresses (PSP_URL); its own routes are in psp/routes.go.
// admin guards what only the order service and operators ask
// (process.AdminToken: ADMIN_TOKEN when set).
func Routes(r chi.Router, app *paymentapp.App, psp *endpoints.List, admin func(http.Handler) http.Handler, log *slog.Logger) {
	h, e := &handlers{app: app}, edge(log)
	r.Get("/payments/{order_id}", e.Handle(h.get))
	// Asked by the order's deadline sweep; may query the PSP by key.
	r.With(admin, web.RateLimit(outcomeRate, outcomeBurst)).Get("/payments/{order_id}/outcome", e.Handle(h.outcome))

	// The PSP is a process of its own (pspsvc); /psp here passes its reads
	// through, so an operator may ask any payment instance. The payment
	// app calls it through psp.Client, as it would a real provider.
	r.Mount("/psp", http.StripPrefix("/psp", passToPSP(psp, log)))
}

// AdminRoutes lists the payment service's own admin routes, relative to
// /admin (service.Runtime.Router mounts them behind ADMIN_TOKEN).
func AdminRoutes(app *paymentapp.App, log *slog.Logger) func(chi.Router) {
	h, e := &handlers{app: app}, edge(log)
	return func(r chi.Router) {
		r.Get("/needs-attention", e.Handle(h.needsAttention))                // parked charges and refunds, with evidence
		r.Post("/needs-attention/{order_id}/retry", e.Handle(h.retryParked)) // put one back for another round
	}
}

// edge answers the errors the handlers return: httpError maps the payment
// domain's, the rest is a logged 500.
func edge(log *slog.Logger) web.Edge { return web.Edge{Log: log, Map: httpError} }
