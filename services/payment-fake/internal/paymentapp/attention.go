package paymentapp

import (
	"context"
	"errors"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentdb"
)

// Attention is what waits for an operator: payments whose charge outcome
// was still unknown at their deadline, and refunds that kept failing until
// theirs, each with its evidence.
type Attention struct {
	Charges []paymentdb.ParkedPayment
	Refunds []paymentdb.ParkedRefund
}

// NeedsAttention lists the parked payments and refunds, oldest first, up
// to limit of each.
func (a *App) NeedsAttention(ctx context.Context, limit int) (Attention, error) {
	charges, err := paymentdb.Parked(ctx, a.db, limit)
	if err != nil {
		return Attention{}, err
	}
	refunds, err := paymentdb.ParkedRefunds(ctx, a.db, limit)
	if err != nil {
		return Attention{}, err
	}
	return Attention{Charges: charges, Refunds: refunds}, nil
}

// Retried says what an operator's retry put back.
type Retried struct {
	Kind    string // "charge" or "refund"
	Status  string // where it stands now: pending, requested
	EventID string // the new request event, if one was written
}

// Retry puts an order's parked payment or refund back for another round:
// a new deadline window from now, the sweep's backoff restarted, and a new
// request event with the same idempotency key, so the consumer tries again
// at once (the PSP still charges or refunds at most once). The request is
// an operator's decision, so a correction: a new event id that names the
// request before it (addChargeRequest, addRefundRequest). A parked charge
// of a cancelled order gets no new charge: the sweep queries the PSP and
// either records what it finds or closes the payment at the new deadline.
// The evidence (attempts, last error, parked reason) stays on the row.
// payment.ErrNotFound: no such order; payment.ErrNotParked: nothing of it
// is parked.
func (a *App) Retry(ctx context.Context, orderID uint64) (Retried, error) {
	var res Retried
	err := sqldb.WithTxRetry(ctx, a.db, a.txRetry(false), func(tx *sqlx.Tx) error {
		res = Retried{}
		p, err := paymentdb.Lock(ctx, tx, orderID)
		if err != nil {
			return err
		}
		log := a.log.With("order_id", orderID, "component", "admin")
		if to, ok := payment.Next(p.Status, payment.Retry); ok {
			moved, err := paymentdb.Charges.Unpark(ctx, tx, orderID, a.cfg.ChargeDeadline, a.cfg.Grace)
			if err := underLock("payment", orderID, moved, err); err != nil {
				return err
			}
			res = Retried{Kind: "charge", Status: string(to)}
			p.Status = to
			if !p.CancelRequested {
				ids, err := a.addChargeRequest(ctx, tx, p)
				if err != nil {
					return err
				}
				res.EventID = ids[0]
			}
			log.WarnContext(ctx, "operator put a parked payment back for another round", "attempts", p.Attempts,
				"last_error", p.LastError, "parked_reason", p.ParkedReason, "event_id", res.EventID)
			return nil
		}

		f, err := paymentdb.LockRefund(ctx, tx, orderID)
		if errors.Is(err, paymentdb.ErrNoRefund) {
			return payment.ErrNotParked
		}
		if err != nil {
			return err
		}
		to, ok := payment.NextRefund(f.Status, payment.RefundRetry)
		if !ok {
			return payment.ErrNotParked
		}
		moved, err := paymentdb.Refunds.Unpark(ctx, tx, orderID, a.cfg.RefundDeadline, a.cfg.Grace)
		if err := underLock("refund", orderID, moved, err); err != nil {
			return err
		}
		ids, err := a.addRefundRequest(ctx, tx, p, f)
		if err != nil {
			return err
		}
		res = Retried{Kind: "refund", Status: string(to), EventID: ids[0]}
		log.WarnContext(ctx, "operator put a parked refund back for another round", "attempts", f.Attempts,
			"last_error", f.LastError, "parked_reason", f.ParkedReason, "event_id", res.EventID)
		return nil
	})
	if err != nil {
		return Retried{}, err
	}
	if res.EventID != "" {
		a.cfg.Wake()
	}
	return res, nil
}
