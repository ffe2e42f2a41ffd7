package inventoryhttp

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/web"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventoryapp"
)

// DemoRoutes lists the inventory's demo-mode route: the synchronous reserve
// call of the order service's wrong way sync-reserve (pkg/aids/wrongway). Only
// run.go mounts it, and only in demo mode.
func DemoRoutes(r chi.Router, app *inventoryapp.App, log *slog.Logger) {
	h, e := &handlers{app: app}, edge(log)
	r.Post("/debug/reservations", e.Handle(h.reserveNow)) // body: the OrderCreated payload
}

// maxReserveBody bounds a synchronous reserve request: an order of 50
// lines fits in a few KiB.
const maxReserveBody = 64 << 10

// reserveNow reserves an order's stock at once and answers the reservation.
func (h *handlers) reserveNow(w http.ResponseWriter, r *http.Request) error {
	var body events.OrderCreatedV1
	if err := web.DecodeJSON(w, r, maxReserveBody, &body); err != nil {
		return err
	}
	if err := body.Validate(); err != nil {
		return web.Errorf(http.StatusUnprocessableEntity, "%v", err)
	}
	res, err := h.app.ReserveNow(r.Context(), body)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, toReservationJSON(res))
	return nil
}
