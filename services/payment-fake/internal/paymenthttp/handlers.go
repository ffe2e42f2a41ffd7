package paymenthttp

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/pkg/web"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentapp"
)

type handlers struct {
	app *paymentapp.App
	log *slog.Logger
}

func (h *handlers) get(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(chi.URLParam(r, "order_id"), 10, 64)
	if err != nil || id == 0 {
		h.fail(w, r, payment.ErrNotFound)
		return
	}
	p, err := h.app.Get(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, toJSON(p))
}

// fail is the one place domain errors become HTTP answers.
func (h *handlers) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, payment.ErrNotFound) {
		err = web.Errorf(http.StatusNotFound, "payment not found")
	}
	web.WriteError(w, r, h.log, err)
}

// guardSwitches refuses changes to the PSP's fault switch outside demo
// mode; reading it (GET /switches) and everything else pass through.
// Paths here are the PSP's own: /psp is stripped already.
func guardSwitches(pspAPI http.Handler, demoMode bool, log *slog.Logger) http.Handler {
	if demoMode {
		return pspAPI
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/switches" && r.Method != http.MethodGet && r.Method != http.MethodHead {
			web.WriteError(w, r, log, web.Errorf(http.StatusForbidden, "the PSP's fault switches can be changed only with DEMO_MODE=true"))
			return
		}
		pspAPI.ServeHTTP(w, r)
	})
}

// paymentJSON is an order's payment as GET /payments/{order_id} shows it.
// psp_charge_id and failure_reason are empty strings until the PSP has
// answered (a declined charge has a charge id too).
type paymentJSON struct {
	OrderID        string    `json:"order_id"`
	Status         string    `json:"status"`
	AmountCents    int64     `json:"amount_cents"`
	Currency       string    `json:"currency"`
	CustomerID     string    `json:"customer_id"`
	IdempotencyKey string    `json:"idempotency_key"`
	PSPChargeID    string    `json:"psp_charge_id"`
	FailureReason  string    `json:"failure_reason"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

func toJSON(p payment.Payment) paymentJSON {
	return paymentJSON{
		OrderID: strconv.FormatUint(p.OrderID, 10), Status: string(p.Status), AmountCents: p.AmountCents,
		Currency: p.Currency, CustomerID: p.CustomerID, IdempotencyKey: p.IdempotencyKey,
		PSPChargeID: p.PSPChargeID, FailureReason: p.FailureReason, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
	}
}
