package orderhttp

import (
	"errors"
	"net/http"

	"github.com/relmsg/ordersaga/pkg/base/web"
	"github.com/relmsg/ordersaga/pkg/base/wire"
	"github.com/relmsg/ordersaga/services/order/internal/orderapp"
)

// reconciliationReport lists the reconciler's audit rows, newest first:
// what it found, the evidence, what it did and how that ended.
func (h *handlers) reconciliationReport(w http.ResponseWriter, r *http.Request) error {
	limit, err := web.Limit(r, 50, 1000)
	if err != nil {
		return err
	}
	var orderID uint64
	if v := r.URL.Query().Get("order_id"); v != "" {
		var ok bool
		if orderID, ok = web.ParseID(v); !ok {
			return web.Errorf(http.StatusBadRequest, "order_id must be an order id")
		}
	}
	rows, err := h.app.Audits(r.Context(), orderID, limit)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"repairs": rows})
	return nil
}

// reconciliationRun runs one pass now and answers its summary.
func (h *handlers) reconciliationRun(w http.ResponseWriter, r *http.Request) error {
	sum, err := h.app.Reconcile(r.Context(), "admin")
	if errors.Is(err, orderapp.ErrReconcilerBusy) {
		return web.Errorf(http.StatusConflict, "%s: ask again when it ends", err)
	}
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, sum)
	return nil
}

// timeline merges the order's records from the three services.
func (h *handlers) timeline(w http.ResponseWriter, r *http.Request) error {
	return readByID(w, r, h.app.Timeline)
}

// deadlines lists open orders by deadline, earliest first.
func (h *handlers) deadlines(w http.ResponseWriter, r *http.Request) error {
	limit, err := web.Limit(r, 50, 1000)
	if err != nil {
		return err
	}
	orders, err := h.app.Upcoming(r.Context(), limit)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, wire.OrderList{Orders: listJSON(orders)})
	return nil
}
