package paymenthttp

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/pkg/base/endpoints"
	"github.com/relmsg/ordersaga/pkg/base/web"
	"github.com/relmsg/ordersaga/pkg/base/wire"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentapp"
)

type handlers struct {
	app *paymentapp.App
}

func (h *handlers) get(w http.ResponseWriter, r *http.Request) error {
	return answerOrder(w, r, h.app.Get, func(ctx context.Context, id uint64, p payment.Payment) (any, error) {
		f, hasRefund, err := h.app.Refund(ctx, id)
		if err != nil {
			return nil, err
		}
		out := toJSON(p)
		if hasRefund {
			rj := toRefundJSON(f)
			out.Refund = &rj
		}
		return out, nil
	})
}

// answerOrder answers a request about the order of the path: what read
// says of it, as the document show makes of that (show may read more).
func answerOrder[T any](w http.ResponseWriter, r *http.Request, read func(context.Context, uint64) (T, error),
	show func(context.Context, uint64, T) (any, error)) error {
	id, err := orderID(r)
	if err != nil {
		return err
	}
	v, err := read(r.Context(), id)
	if err != nil {
		return err
	}
	out, err := show(r.Context(), id, v)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// outcome answers what became of an order's charge: from the payment's
// record when it is decided, else from a status query at the PSP by the
// charge's key. It records nothing.
func (h *handlers) outcome(w http.ResponseWriter, r *http.Request) error {
	return answerOrder(w, r, h.app.Outcome, func(_ context.Context, id uint64, o paymentapp.Outcome) (any, error) {
		return wire.PaymentOutcome{OrderID: strconv.FormatUint(id, 10), Outcome: o.Outcome, Source: o.Source,
			PaymentStatus: string(o.PaymentStatus), PSPChargeID: o.PSPChargeID, Detail: o.Detail}, nil
	})
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
	out := wire.NeedsAttention{Charges: []wire.ParkedCharge{}, Refunds: []wire.ParkedRefund{}}
	for _, p := range att.Charges {
		out.Charges = append(out.Charges, wire.ParkedCharge{Payment: toJSON(p.Payment),
			SweepRounds: p.SweepRounds, ParkedAt: p.ParkedAt})
	}
	for _, f := range att.Refunds {
		out.Refunds = append(out.Refunds, wire.ParkedRefund{PaymentRefund: toRefundJSON(f.Refund),
			OrderID: strconv.FormatUint(f.OrderID, 10), SweepRounds: f.SweepRounds, ParkedAt: f.ParkedAt})
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// retryParked puts an order's parked charge or refund back for another
// round.
func (h *handlers) retryParked(w http.ResponseWriter, r *http.Request) error {
	return answerOrder(w, r, h.app.Retry, func(_ context.Context, id uint64, res paymentapp.Retried) (any, error) {
		return wire.RetryParkedResult{OrderID: strconv.FormatUint(id, 10), Kind: res.Kind, Status: res.Status,
			EventID: res.EventID}, nil
	})
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

// toJSON is an order's payment as GET /payments/{order_id} shows it.
// psp_charge_id and failure_reason are empty strings until the PSP has
// answered (a declined charge has a charge id too). deadline_at is null for
// a cancel marker; refund is null until a refund is requested.
func toJSON(p payment.Payment) wire.Payment {
	j := wire.Payment{
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

func toRefundJSON(f payment.Refund) wire.PaymentRefund {
	return wire.PaymentRefund{Status: string(f.Status), AmountCents: f.AmountCents, IdempotencyKey: f.IdempotencyKey,
		PSPChargeID: f.PSPChargeID, PSPRefundID: f.PSPRefundID, Reason: f.Reason, DeadlineAt: f.DeadlineAt,
		Attempts: f.Attempts, LastError: f.LastError, ParkedReason: f.ParkedReason,
		CreatedAt: f.CreatedAt, UpdatedAt: f.UpdatedAt}
}
