// Package paymenthttp is the payment service's HTTP API (SPEC section 7):
// the payment of an order, and the fake PSP's own API mounted under /psp.
package paymenthttp

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentapp"
)

// Routes lists every route of the payment service. pspAPI is the fake PSP's
// handler (psp.Server.Handler); its own routes are in psp/routes.go. Its
// fault switch can be changed (PUT /psp/switches) only in demo mode.
func Routes(r chi.Router, app *paymentapp.App, pspAPI http.Handler, demoMode bool, log *slog.Logger) {
	h := &handlers{app: app, log: log}
	r.Get("/payments/{order_id}", h.get)

	// The PSP shares the listener, not the code path: the payment app calls
	// it over HTTP through psp.Client, as it would call a real provider.
	r.Mount("/psp", http.StripPrefix("/psp", guardSwitches(pspAPI, demoMode, log)))
}
