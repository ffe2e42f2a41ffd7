package orderhttp

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/pkg/web"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderapp"
)

type handlers struct {
	app *orderapp.App
	log *slog.Logger
}

// maxBody bounds a create request: 50 lines fit in a few KiB.
const maxBody = 64 << 10

// maxKeyLen matches orders.idempotency_key.
const maxKeyLen = 128

type createRequest struct {
	CustomerID string `json:"customer_id"`
	Items      []struct {
		SKU      string `json:"sku"`
		Quantity int    `json:"quantity"`
	} `json:"items"`
}

func (h *handlers) create(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if err := checkKey(key); err != nil {
		h.fail(w, r, err)
		return
	}
	var body createRequest
	if err := web.DecodeJSON(w, r, maxBody, &body); err != nil {
		h.fail(w, r, err)
		return
	}
	req := order.Request{CustomerID: body.CustomerID}
	for _, it := range body.Items {
		req.Lines = append(req.Lines, order.Line{SKU: it.SKU, Quantity: it.Quantity})
	}
	o, created, err := h.app.Create(r.Context(), key, req)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if !created {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Location", "/orders/"+strconv.FormatUint(o.ID, 10))
	// 202: accepted, not done. The saga continues asynchronously.
	web.WriteJSON(w, http.StatusAccepted, toJSON(o))
}

func checkKey(key string) error {
	if key == "" {
		return web.Errorf(http.StatusBadRequest, "the Idempotency-Key header is required")
	}
	if len(key) > maxKeyLen {
		return web.Errorf(http.StatusBadRequest, "Idempotency-Key longer than %d characters", maxKeyLen)
	}
	for _, c := range key {
		if c < 0x21 || c > 0x7e {
			return web.Errorf(http.StatusBadRequest, "Idempotency-Key must be printable ASCII without spaces")
		}
	}
	return nil
}

func (h *handlers) get(w http.ResponseWriter, r *http.Request) {
	id, ok := web.ParseID(chi.URLParam(r, "id"))
	if !ok {
		h.fail(w, r, web.Errorf(http.StatusNotFound, "order not found"))
		return
	}
	o, err := h.app.Get(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, toJSON(o))
}

type cancelRequest struct {
	Reason string `json:"reason"`
}

// cancel answers 202 with the order and what the request did: "cancelled"
// (the compensations are under way), or "already_cancelled" /
// "already_rejected" (nothing to do; a repeated cancel is not an error).
func (h *handlers) cancel(w http.ResponseWriter, r *http.Request) {
	if err := checkKey(r.Header.Get("Idempotency-Key")); err != nil {
		h.fail(w, r, err)
		return
	}
	id, ok := web.ParseID(chi.URLParam(r, "id"))
	if !ok {
		h.fail(w, r, web.Errorf(http.StatusNotFound, "order not found"))
		return
	}
	body := cancelRequest{Reason: "cancelled by the customer"}
	if r.ContentLength != 0 {
		if err := web.DecodeJSON(w, r, 4<<10, &body); err != nil {
			h.fail(w, r, err)
			return
		}
		if len(body.Reason) > 200 {
			h.fail(w, r, web.Errorf(http.StatusUnprocessableEntity, "reason longer than 200 characters"))
			return
		}
		if body.Reason == "" {
			body.Reason = "cancelled by the customer"
		}
	}
	o, result, err := h.app.Cancel(r.Context(), id, body.Reason)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	status := http.StatusAccepted
	if result != orderapp.Cancelled {
		status = http.StatusOK
	}
	web.WriteJSON(w, status, map[string]any{"result": result, "order": toJSON(o)})
}

func (h *handlers) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	status := order.Status(q.Get("status"))
	if status != "" && !status.Valid() {
		h.fail(w, r, web.Errorf(http.StatusBadRequest, "unknown status %q (want one of %v)", status, order.Statuses))
		return
	}
	limit, err := web.Limit(r, 50, 500)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var before uint64
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			h.fail(w, r, web.Errorf(http.StatusBadRequest, "before must be an order id"))
			return
		}
		before = n
	}
	orders, err := h.app.List(r.Context(), status, before, limit)
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

// fail is the one place domain errors become HTTP answers.
func (h *handlers) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, order.ErrInvalid):
		err = web.Errorf(http.StatusUnprocessableEntity, "%s", err.Error())
	case errors.Is(err, order.ErrNotFound):
		err = web.Errorf(http.StatusNotFound, "order not found")
	case errors.Is(err, order.ErrIdempotencyConflict):
		err = web.Errorf(http.StatusUnprocessableEntity, "%s", err.Error())
	}
	web.WriteError(w, r, h.log, err)
}

type itemJSON struct {
	SKU            string `json:"sku"`
	Quantity       int    `json:"quantity"`
	UnitPriceCents int64  `json:"unit_price_cents"`
}

type orderJSON struct {
	OrderID      string     `json:"order_id"`
	Status       string     `json:"status"`
	StatusReason string     `json:"status_reason,omitempty"`
	RefundStatus string     `json:"refund_status"`
	CustomerID   string     `json:"customer_id"`
	Items        []itemJSON `json:"items,omitempty"`
	TotalCents   int64      `json:"total_cents"`
	Currency     string     `json:"currency"`
	CreatedAt    time.Time  `json:"created_at"`
	UpdatedAt    time.Time  `json:"updated_at"`
	// DeadlineAt: when the current waiting state runs out and the order is
	// cancelled; absent once the saga is over.
	DeadlineAt *time.Time `json:"deadline_at,omitempty"`
}

func toJSON(o order.Order) orderJSON {
	j := orderJSON{
		OrderID: strconv.FormatUint(o.ID, 10), Status: string(o.Status), StatusReason: o.StatusReason,
		RefundStatus: string(o.RefundStatus), CustomerID: o.CustomerID, TotalCents: o.TotalCents,
		Currency: o.Currency, CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt,
	}
	if !o.DeadlineAt.IsZero() {
		d := o.DeadlineAt
		j.DeadlineAt = &d
	}
	for _, it := range o.Items {
		j.Items = append(j.Items, itemJSON{SKU: it.SKU, Quantity: it.Quantity, UnitPriceCents: it.UnitPriceCents})
	}
	return j
}
