package paymenthttp

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/pkg/endpoints"
	"github.com/relmsg/ordersaga/pkg/web"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentapp"
)

type handlers struct {
	app *paymentapp.App
}

func (h *handlers) get(w http.ResponseWriter, r *http.Request) error {
	id, err := orderID(r)
	if err != nil {
		return err
	}
	p, err := h.app.Get(r.Context(), id)
	if err != nil {
		return err
	}
	f, hasRefund, err := h.app.Refund(r.Context(), id)
	if err != nil {
		return err
	}
	out := toJSON(p)
	if hasRefund {
		rj := toRefundJSON(f)
		out.Refund = &rj
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// outcome answers what became of an order's charge: from the payment's
// record when it is decided, else from a status query at the PSP by the
// charge's key. It records nothing.
func (h *handlers) outcome(w http.ResponseWriter, r *http.Request) error {
	id, err := orderID(r)
	if err != nil {
		return err
	}
	o, err := h.app.Outcome(r.Context(), id)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, map[string]string{"order_id": strconv.FormatUint(id, 10), "outcome": o.Outcome,
		"source": o.Source, "payment_status": string(o.PaymentStatus), "psp_charge_id": o.PSPChargeID, "detail": o.Detail})
	return nil
}

// needsAttention lists the parked charges and refunds with their evidence.
func (h *handlers) needsAttention(w http.ResponseWriter, r *http.Request) error {
	limit, err := web.Limit(r, 100, 1000)
	if err != nil {
		return err
	}
	att, err := h.app.NeedsAttention(r.Context(), limit)
	if err != nil {
		return err
	}
	out := attentionJSON{Charges: []parkedChargeJSON{}, Refunds: []parkedRefundJSON{}}
	for _, p := range att.Charges {
		out.Charges = append(out.Charges, parkedChargeJSON{paymentJSON: toJSON(p.Payment),
			SweepRounds: p.SweepRounds, ParkedAt: p.ParkedAt})
	}
	for _, f := range att.Refunds {
		out.Refunds = append(out.Refunds, parkedRefundJSON{refundJSON: toRefundJSON(f.Refund),
			OrderID: strconv.FormatUint(f.OrderID, 10), SweepRounds: f.SweepRounds, ParkedAt: f.ParkedAt})
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// retryParked puts an order's parked charge or refund back for another
// round.
func (h *handlers) retryParked(w http.ResponseWriter, r *http.Request) error {
	id, err := orderID(r)
	if err != nil {
		return err
	}
	res, err := h.app.Retry(r.Context(), id)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, map[string]string{"order_id": strconv.FormatUint(id, 10),
		"kind": res.Kind, "status": res.Status, "event_id": res.EventID})
	return nil
}

// orderID reads the order id of the path: anything but an order id is a
// payment not found.
func orderID(r *http.Request) (uint64, error) {
	id, ok := web.ParseID(chi.URLParam(r, "order_id"))
	if !ok {
		return 0, payment.ErrNotFound
	}
	return id, nil
}

// httpError is the one place domain errors become HTTP answers (the
// web.Edge of every route calls it); any other error is returned as it
// is and answered with a generic 500.
func httpError(err error) error {
	switch {
	case errors.Is(err, payment.ErrNotFound):
		return web.Errorf(http.StatusNotFound, "payment not found")
	case errors.Is(err, payment.ErrNotParked):
		return web.Errorf(http.StatusConflict, "nothing of this order is parked as needs_attention")
	}
	return err
}

// passToPSP answers the PSP's reads (GET, HEAD) under /psp (prefix
// stripped) from the PSP process, so the walkthrough's URLs on the payment
// service keep working; its writes (charges, refunds, the fault switch)
// are not passed: only the payment service's own client and the lab reach
// those, on the PSP itself. A read is safe to send twice, so an address
// that cannot be reached is followed by the next of PSP_URL
// (endpoints.Always), starting with the one that answered last.
func passToPSP(psp *endpoints.List, log *slog.Logger) http.HandlerFunc {
	client := &http.Client{Timeout: 10 * time.Second}
	return web.Handle(log, func(w http.ResponseWriter, r *http.Request) error {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			return web.Errorf(http.StatusMethodNotAllowed,
				"the PSP pass-through is read-only: %s %s goes to the PSP process itself (PSP_URL), for the payment service and the lab", r.Method, r.URL.Path)
		}
		resp, err := psp.Do(r.Context(), client, endpoints.Always, func(base string) (*http.Request, error) {
			u := base + r.URL.EscapedPath()
			if r.URL.RawQuery != "" {
				u += "?" + r.URL.RawQuery
			}
			req, err := http.NewRequestWithContext(r.Context(), r.Method, u, nil)
			if err == nil {
				req.Header.Set("Accept", "application/json")
			}
			return req, err
		})
		if err != nil {
			log.WarnContext(r.Context(), "psp pass-through failed", "path", r.URL.Path, "err", err)
			return web.Errorf(http.StatusBadGateway, "the PSP did not answer")
		}
		defer resp.Body.Close()
		for _, h := range []string{"Content-Type", "Idempotent-Replayed"} {
			if v := resp.Header.Get(h); v != "" {
				w.Header().Set(h, v)
			}
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, io.LimitReader(resp.Body, maxPassBody))
		return nil
	})
}

// maxPassBody bounds what the pass-through copies from the PSP.
const maxPassBody = 8 << 20

// paymentJSON is an order's payment as GET /payments/{order_id} shows it.
// psp_charge_id and failure_reason are empty strings until the PSP has
// answered (a declined charge has a charge id too). deadline_at is null for
// a cancel marker; refund is null until a refund is requested.
type paymentJSON struct {
	OrderID         string      `json:"order_id"`
	Status          string      `json:"status"`
	AmountCents     int64       `json:"amount_cents"`
	Currency        string      `json:"currency"`
	CustomerID      string      `json:"customer_id"`
	IdempotencyKey  string      `json:"idempotency_key"`
	PSPChargeID     string      `json:"psp_charge_id"`
	FailureReason   string      `json:"failure_reason"`
	ChargeSent      bool        `json:"charge_sent"`
	CancelRequested bool        `json:"cancel_requested"`
	CancelReason    string      `json:"cancel_reason"`
	DeadlineAt      *time.Time  `json:"deadline_at"`
	Attempts        int         `json:"attempts"`
	LastError       string      `json:"last_error"`
	ParkedReason    string      `json:"parked_reason"`
	Refund          *refundJSON `json:"refund"`
	CreatedAt       time.Time   `json:"created_at"`
	UpdatedAt       time.Time   `json:"updated_at"`
}

func toJSON(p payment.Payment) paymentJSON {
	j := paymentJSON{
		OrderID: strconv.FormatUint(p.OrderID, 10), Status: string(p.Status), AmountCents: p.AmountCents,
		Currency: p.Currency, CustomerID: p.CustomerID, IdempotencyKey: p.IdempotencyKey,
		PSPChargeID: p.PSPChargeID, FailureReason: p.FailureReason, ChargeSent: p.ChargeSent,
		CancelRequested: p.CancelRequested, CancelReason: p.CancelReason,
		Attempts: p.Attempts, LastError: p.LastError, ParkedReason: p.ParkedReason,
		CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
	}
	if !p.DeadlineAt.IsZero() {
		d := p.DeadlineAt
		j.DeadlineAt = &d
	}
	return j
}

// refundJSON is an order's refund.
type refundJSON struct {
	Status         string    `json:"status"`
	AmountCents    int64     `json:"amount_cents"`
	IdempotencyKey string    `json:"idempotency_key"`
	PSPChargeID    string    `json:"psp_charge_id"`
	PSPRefundID    string    `json:"psp_refund_id"`
	Reason         string    `json:"reason"`
	DeadlineAt     time.Time `json:"deadline_at"`
	Attempts       int       `json:"attempts"`
	LastError      string    `json:"last_error"`
	ParkedReason   string    `json:"parked_reason"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

func toRefundJSON(f payment.Refund) refundJSON {
	return refundJSON{Status: string(f.Status), AmountCents: f.AmountCents, IdempotencyKey: f.IdempotencyKey,
		PSPChargeID: f.PSPChargeID, PSPRefundID: f.PSPRefundID, Reason: f.Reason, DeadlineAt: f.DeadlineAt,
		Attempts: f.Attempts, LastError: f.LastError, ParkedReason: f.ParkedReason,
		CreatedAt: f.CreatedAt, UpdatedAt: f.UpdatedAt}
}

// attentionJSON is GET /admin/needs-attention.
type attentionJSON struct {
	Charges []parkedChargeJSON `json:"charges"`
	Refunds []parkedRefundJSON `json:"refunds"`
}

type parkedChargeJSON struct {
	paymentJSON
	SweepRounds int       `json:"sweep_rounds"`
	ParkedAt    time.Time `json:"parked_at"`
}

type parkedRefundJSON struct {
	OrderID string `json:"order_id"`
	refundJSON
	SweepRounds int       `json:"sweep_rounds"`
	ParkedAt    time.Time `json:"parked_at"`
}
