package inventoryhttp

import (
	"errors"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/pkg/base/web"
	"github.com/relmsg/ordersaga/pkg/base/wire"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventoryapp"
)

type handlers struct {
	app      *inventoryapp.App
	inFlight *web.InFlight // receipt keys whose first request is being processed here
}

// maxBody bounds a receipt request: {"quantity":N} is a few bytes.
const maxBody = 1 << 10

func (h *handlers) listStock(w http.ResponseWriter, r *http.Request) error {
	stock, err := h.app.Stock(r.Context())
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, wire.StockList{Stock: toJSON(stock, toStockJSON)})
	return nil
}

func (h *handlers) getStock(w http.ResponseWriter, r *http.Request) error {
	s, err := h.app.StockOf(r.Context(), chi.URLParam(r, "sku"))
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, toStockJSON(s))
	return nil
}

// receive books goods received: {"quantity":N} more on hand, once per
// Idempotency-Key (docs/contract.md, "Idempotency keys"): the same key
// and request again answer the stock as it is now with Idempotent-Replayed,
// and change nothing.
func (h *handlers) receive(w http.ResponseWriter, r *http.Request) error {
	key, err := web.IdempotencyKey(r)
	if err != nil {
		return err
	}
	var body wire.ReceiptRequest
	if err := web.DecodeJSON(w, r, maxBody, &body); err != nil {
		return err
	}
	end, err := h.inFlight.Begin("receipt", key)
	if err != nil {
		return err
	}
	defer end()
	s, replayed, err := h.app.Receive(r.Context(), key, chi.URLParam(r, "sku"), body.Quantity)
	if err != nil {
		return err
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	web.WriteJSON(w, http.StatusOK, toStockJSON(s))
	return nil
}

func (h *handlers) getReservation(w http.ResponseWriter, r *http.Request) error {
	id, ok := web.ParseID(chi.URLParam(r, "order_id"))
	if !ok {
		return inventory.ErrNoReservation
	}
	res, err := h.app.Reservation(r.Context(), id)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, toReservationJSON(res))
	return nil
}

// listGaps lists event gaps, newest first. open=true: only the unresolved
// ones; aggregate_id: only one order's, all of them, oldest first (as
// /admin/outbox?aggregate_id=); limit: 1 to 1000 (100).
func (h *handlers) listGaps(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	var (
		gaps []inventory.Gap
		err  error
	)
	if v := q.Get("aggregate_id"); v != "" {
		id, ok := web.ParseID(v)
		if !ok {
			return web.Errorf(http.StatusBadRequest, "aggregate_id must be a positive number")
		}
		gaps, err = h.app.OrderGaps(r.Context(), id)
	} else {
		open := false
		if v := q.Get("open"); v != "" {
			if open, err = strconv.ParseBool(v); err != nil {
				return web.Errorf(http.StatusBadRequest, "open must be true or false")
			}
		}
		limit := 100
		if v := q.Get("limit"); v != "" {
			if limit, err = strconv.Atoi(v); err != nil {
				return web.Errorf(http.StatusBadRequest, "limit must be a number")
			}
		}
		gaps, err = h.app.Gaps(r.Context(), open, limit)
	}
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, wire.GapList{Gaps: toJSON(gaps, toGapJSON)})
	return nil
}

// maxResolution is event_gaps.resolution's width.
const maxResolution = 255

type resolveRequest struct {
	Resolution string `json:"resolution"`
}

// resolveGap closes an open gap by hand, with the operator's reason.
func (h *handlers) resolveGap(w http.ResponseWriter, r *http.Request) error {
	id, ok := web.ParseID(chi.URLParam(r, "id"))
	if !ok {
		return inventory.ErrNoGap
	}
	var body resolveRequest
	if err := web.DecodeJSON(w, r, maxBody, &body); err != nil {
		return err
	}
	if n := utf8.RuneCountInString(body.Resolution); n > maxResolution {
		return web.Errorf(http.StatusUnprocessableEntity, "resolution longer than %d characters", maxResolution)
	}
	g, err := h.app.ResolveGap(r.Context(), id, body.Resolution)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, toGapJSON(g))
	return nil
}

// httpError is the one place domain errors become HTTP answers (the
// web.Edge of every route calls it); any other error is returned as it
// is and answered with a generic 500.
func httpError(err error) error {
	switch {
	case errors.Is(err, inventory.ErrInvalid):
		return web.Errorf(http.StatusUnprocessableEntity, "%s", err.Error())
	case errors.Is(err, inventory.ErrUnknownSKU):
		return web.Errorf(http.StatusNotFound, "sku not found")
	case errors.Is(err, inventory.ErrNoReservation):
		return web.Errorf(http.StatusNotFound, "reservation not found")
	case errors.Is(err, inventory.ErrNoGap):
		return web.Errorf(http.StatusNotFound, "gap not found")
	case errors.Is(err, inventory.ErrGapResolved):
		return web.Errorf(http.StatusConflict, "gap already resolved")
	case errors.Is(err, inventory.ErrKeyReused):
		return web.Problemf(http.StatusUnprocessableEntity, web.TypeKeyReused, "%s", err.Error())
	case errors.Is(err, inventory.ErrNoReceipt):
		// The key's row went (retention) between the duplicate and its read.
		return web.Errorf(http.StatusConflict, "the receipt's key changed while it was read: send it again")
	}
	return err
}

// toJSON converts each of a list with to, in order: an empty list stays an
// empty JSON array, not null.
func toJSON[T, J any](in []T, to func(T) J) []J {
	out := make([]J, len(in))
	for i, v := range in {
		out[i] = to(v)
	}
	return out
}

func toStockJSON(s inventory.Stock) wire.Stock {
	return wire.Stock{SKU: s.SKU, OnHand: s.OnHand, Reserved: s.Reserved, Available: s.Available()}
}

// optTime is nil for the zero time: JSON null rather than year 1.
func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func toReservationJSON(r inventory.Reservation) wire.Reservation {
	return wire.Reservation{
		OrderID: strconv.FormatUint(r.OrderID, 10), Status: string(r.Status), Reason: r.Reason,
		Items: toJSON(r.Items, func(l inventory.Line) wire.ReservationLine {
			return wire.ReservationLine{SKU: l.SKU, Quantity: l.Quantity}
		}),
		ExpiresAt: optTime(r.ExpiresAt), ExpiredAt: optTime(r.ExpiredAt),
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

func toGapJSON(g inventory.Gap) wire.Gap {
	return wire.Gap{ID: g.ID, Consumer: g.Consumer, AggregateID: strconv.FormatUint(g.OrderID, 10), EventID: g.EventID,
		EventType: g.EventType, ReceivedVersion: g.ReceivedVersion, ExpectedVersion: g.ExpectedVersion,
		DetectedAt: g.DetectedAt, DeadlineAt: g.DeadlineAt, Overdue: g.Overdue, AlertedAt: optTime(g.AlertedAt),
		ResolvedAt: optTime(g.ResolvedAt), Resolution: g.Resolution}
}
