package inventoryhttp

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/pkg/web"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventoryapp"
)

type handlers struct {
	app *inventoryapp.App
	log *slog.Logger
}

// maxBody bounds a receipt request: {"quantity":N} is a few bytes.
const maxBody = 1 << 10

func (h *handlers) listStock(w http.ResponseWriter, r *http.Request) {
	stock, err := h.app.Stock(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := make([]stockJSON, len(stock))
	for i, s := range stock {
		out[i] = toStockJSON(s)
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"stock": out})
}

func (h *handlers) getStock(w http.ResponseWriter, r *http.Request) {
	s, err := h.app.StockOf(r.Context(), chi.URLParam(r, "sku"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, toStockJSON(s))
}

type receiptRequest struct {
	Quantity int `json:"quantity"`
}

// receive books goods received: {"quantity":N} more on hand.
func (h *handlers) receive(w http.ResponseWriter, r *http.Request) {
	var body receiptRequest
	if err := web.DecodeJSON(w, r, maxBody, &body); err != nil {
		h.fail(w, r, err)
		return
	}
	s, err := h.app.Receive(r.Context(), chi.URLParam(r, "sku"), body.Quantity)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, toStockJSON(s))
}

func (h *handlers) getReservation(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(chi.URLParam(r, "order_id"), 10, 64)
	if err != nil || id == 0 {
		h.fail(w, r, inventory.ErrNoReservation)
		return
	}
	res, err := h.app.Reservation(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, toReservationJSON(res))
}

// fail is the one place domain errors become HTTP answers.
func (h *handlers) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, inventory.ErrInvalid):
		err = web.Errorf(http.StatusUnprocessableEntity, "%s", err.Error())
	case errors.Is(err, inventory.ErrUnknownSKU):
		err = web.Errorf(http.StatusNotFound, "sku not found")
	case errors.Is(err, inventory.ErrNoReservation):
		err = web.Errorf(http.StatusNotFound, "reservation not found")
	}
	web.WriteError(w, r, h.log, err)
}

type stockJSON struct {
	SKU       string `json:"sku"`
	OnHand    int64  `json:"on_hand"`
	Reserved  int64  `json:"reserved"`
	Available int64  `json:"available"`
}

func toStockJSON(s inventory.Stock) stockJSON {
	return stockJSON{SKU: s.SKU, OnHand: s.OnHand, Reserved: s.Reserved, Available: s.Available()}
}

type lineJSON struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

type reservationJSON struct {
	OrderID   string     `json:"order_id"`
	Status    string     `json:"status"`
	Reason    string     `json:"reason"`
	Items     []lineJSON `json:"items"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
}

func toReservationJSON(r inventory.Reservation) reservationJSON {
	j := reservationJSON{
		OrderID: strconv.FormatUint(r.OrderID, 10), Status: string(r.Status), Reason: r.Reason,
		Items: make([]lineJSON, len(r.Items)), CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
	for i, l := range r.Items {
		j.Items[i] = lineJSON{SKU: l.SKU, Quantity: l.Quantity}
	}
	return j
}
