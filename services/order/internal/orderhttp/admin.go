package orderhttp

import (
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/pkg/web"
)

// reconciliationReport lists the reconciler's audit rows, newest first:
// what it found, the evidence, what it did and how that ended.
func (h *handlers) reconciliationReport(w http.ResponseWriter, r *http.Request) {
	limit, err := limitParam(r, 50, 1000)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var orderID uint64
	if v := r.URL.Query().Get("order_id"); v != "" {
		if orderID, err = strconv.ParseUint(v, 10, 64); err != nil || orderID == 0 {
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
	id, err := strconv.ParseUint(chi.URLParam(r, "id"), 10, 64)
	if err != nil || id == 0 {
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
	limit, err := limitParam(r, 50, 1000)
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

func limitParam(r *http.Request, def, max int) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, web.Errorf(http.StatusBadRequest, "limit must be between 1 and %d", max)
	}
	return n, nil
}
