package orderhttp

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/pkg/base/web"
	"github.com/relmsg/ordersaga/pkg/base/wire"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderapp"
)

type handlers struct {
	app *orderapp.App
	// inFlight holds the create and cancel keys whose first request this
	// instance is still processing: a second one gets 409 at once.
	inFlight *web.InFlight
}

// maxBody bounds a create request: 50 lines fit in a few KiB.
const maxBody = 64 << 10

// maxReason is the longest cancel reason, in characters (the column
// order_history.reason holds it).
const maxReason = 200

func (h *handlers) create(w http.ResponseWriter, r *http.Request) error {
	key, err := web.IdempotencyKey(r)
	if err != nil {
		return err
	}
	var body wire.CreateOrderRequest
	if err := web.DecodeJSON(w, r, maxBody, &body); err != nil {
		return err
	}
	end, err := h.inFlight.Begin("create", key)
	if err != nil {
		return err
	}
	defer end()
	req := order.Request{CustomerID: body.CustomerID}
	for _, it := range body.Items {
		req.Lines = append(req.Lines, order.Line{SKU: it.SKU, Quantity: it.Quantity})
	}
	o, created, err := h.app.Create(r.Context(), key, req)
	if err != nil {
		return err
	}
	if !created {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Location", "/orders/"+strconv.FormatUint(o.ID, 10))
	// 202: accepted, not done. The saga continues asynchronously.
	web.WriteJSON(w, http.StatusAccepted, toJSON(o))
	return nil
}

func (h *handlers) get(w http.ResponseWriter, r *http.Request) error {
	return readByID(w, r, func(ctx context.Context, id uint64) (wire.Order, error) {
		o, err := h.app.Get(ctx, id)
		return toJSON(o), err
	})
}

// readByID answers 200 with what read returns for the order the path
// names: the GET of one order's record.
func readByID[T any](w http.ResponseWriter, r *http.Request, read func(ctx context.Context, id uint64) (T, error)) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	v, err := read(r.Context(), id)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, v)
	return nil
}

// cancel answers 202 with the order and what the request did: "cancelled"
// (the compensations are under way), or 200 with "already_cancelled" /
// "already_rejected" (nothing to do; a repeated cancel is not an error).
// The Idempotency-Key is honoured as for a create: the same key and request
// get the first answer again (Idempotent-Replayed: true), the same key with
// another order or reason 422.
func (h *handlers) cancel(w http.ResponseWriter, r *http.Request) error {
	key, err := web.IdempotencyKey(r)
	if err != nil {
		return err
	}
	id, err := pathID(r)
	if err != nil {
		return err
	}
	body := wire.CancelOrderRequest{Reason: "cancelled by the customer"}
	if r.ContentLength != 0 {
		// The decoder refuses control characters and invalid UTF-8; the
		// length is counted in characters, as the contract states it.
		if err := web.DecodeJSON(w, r, 4<<10, &body); err != nil {
			return err
		}
		if utf8.RuneCountInString(body.Reason) > maxReason {
			return web.Errorf(http.StatusUnprocessableEntity, "reason longer than %d characters", maxReason)
		}
		if body.Reason == "" {
			body.Reason = "cancelled by the customer"
		}
	}
	end, err := h.inFlight.Begin("cancel", key)
	if err != nil {
		return err
	}
	defer end()
	o, result, replayed, err := h.app.Cancel(r.Context(), key, id, body.Reason)
	if err != nil {
		return err
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	status := http.StatusAccepted
	if result != orderapp.Cancelled {
		status = http.StatusOK
	}
	web.WriteJSON(w, status, wire.CancelResult{Result: string(result), Order: toJSON(o)})
	return nil
}

func (h *handlers) list(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	status := order.Status(q.Get("status"))
	if status != "" && !status.Valid() {
		return web.Errorf(http.StatusBadRequest, "unknown status %q (want one of %v)", status, order.Statuses)
	}
	limit, err := web.Limit(r, 50, 500)
	if err != nil {
		return err
	}
	var before uint64
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return web.Errorf(http.StatusBadRequest, "before must be an order id")
		}
		before = n
	}
	orders, err := h.app.List(r.Context(), status, before, limit)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, wire.OrderList{Orders: listJSON(orders)})
	return nil
}

// pathID reads the order id of the path: anything but an order id is an
// order not found.
func pathID(r *http.Request) (uint64, error) {
	id, ok := web.ParseID(chi.URLParam(r, "id"))
	if !ok {
		return 0, order.ErrNotFound
	}
	return id, nil
}

// httpError is the one place domain errors become HTTP answers (the
// web.Edge of every route calls it); any other error is returned as it
// is and answered with a generic 500.
func httpError(err error) error {
	switch {
	case errors.Is(err, order.ErrInvalid):
		return web.Errorf(http.StatusUnprocessableEntity, "%s", err.Error())
	case errors.Is(err, order.ErrNotFound):
		return web.Errorf(http.StatusNotFound, "order not found")
	case errors.Is(err, order.ErrIdempotencyConflict):
		return web.Problemf(http.StatusUnprocessableEntity, web.TypeKeyReused, "%s", err.Error())
	}
	return err
}

func listJSON(orders []order.Order) []wire.Order {
	out := make([]wire.Order, len(orders))
	for i, o := range orders {
		out[i] = toJSON(o)
	}
	return out
}

func toJSON(o order.Order) wire.Order {
	j := wire.Order{
		OrderID: strconv.FormatUint(o.ID, 10), Status: string(o.Status), StatusReason: o.StatusReason,
		RefundStatus: string(o.RefundStatus), CustomerID: o.CustomerID, TotalCents: o.TotalCents,
		Currency: o.Currency, CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt,
	}
	if !o.DeadlineAt.IsZero() {
		d := o.DeadlineAt
		j.DeadlineAt = &d
	}
	for _, it := range o.Items {
		j.Items = append(j.Items, wire.OrderItem{SKU: it.SKU, Quantity: it.Quantity, UnitPriceCents: it.UnitPriceCents})
	}
	return j
}
