package orderhttp

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/pkg/web"
)

// reconciliationReport lists the reconciler's audit rows, newest first:
// what it found, the evidence, what it did and how that ended.
func (h *handlers) reconciliationReport(w http.ResponseWriter, r *http.Request) {
	limit, err := web.Limit(r, 50, 1000)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var orderID uint64
	if v := r.URL.Query().Get("order_id"); v != "" {
		var ok bool
		if orderID, ok = web.ParseID(v); !ok {
			h.fail(w, r, web.Errorf(http.StatusBadRequest, "order_id must be an order id"))
			return
		}
	}
	rows, err := h.app.Audits(r.Context(), orderID, limit)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"repairs": rows})
}

// reconciliationRun runs one pass now and answers its summary.
func (h *handlers) reconciliationRun(w http.ResponseWriter, r *http.Request) {
	sum, err := h.app.Reconcile(r.Context(), "admin")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, sum)
}

// timeline merges the order's records from the three services.
func (h *handlers) timeline(w http.ResponseWriter, r *http.Request) {
	id, ok := web.ParseID(chi.URLParam(r, "id"))
	if !ok {
		h.fail(w, r, web.Errorf(http.StatusNotFound, "order not found"))
		return
	}
	tl, err := h.app.Timeline(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, tl)
}

// deadlines lists open orders by deadline, earliest first.
func (h *handlers) deadlines(w http.ResponseWriter, r *http.Request) {
	limit, err := web.Limit(r, 50, 1000)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	orders, err := h.app.Upcoming(r.Context(), limit)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := make([]orderJSON, len(orders))
	for i, o := range orders {
		out[i] = toJSON(o)
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"orders": out})
}
