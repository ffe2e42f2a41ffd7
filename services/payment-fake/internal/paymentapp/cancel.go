package paymentapp

import (
	"context"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentdb"
)

// OnOrderCancelled is the payment side of a cancel, inside the inbox
// transaction of the "payment" consumer. What it does depends on where the
// payment stands (payment.Next with payment.Cancel), each a compare-and-set
// under the payment's row lock:
//
//   - no payment yet (the cancel overtook inventory.reserved): nothing to
//     undo (a "null compensation"), but a marker row in status
//     cancelled_before_charge stays, so the late inventory.reserved finds
//     the order id taken and charges nothing;
//   - pending or needs_attention (the charge's outcome is not known): the
//     cancel is remembered (cancel_requested_at). A cancel is no reason to
//     abandon an outcome: whoever learns it records it, and a success is
//     refunded in that same transaction. No new charge is started for the
//     order (ChargeAtPSP only queries), and the sweep closes a payment the
//     PSP never charged at its deadline;
//   - succeeded: the refund is requested now (a refunds row and
//     payment.refund-requested, one transaction);
//   - failed, refunded, cancelled_before_charge: nothing to compensate.
func (a *App) OnOrderCancelled(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
	ev, err := events.Decode[events.OrderCancelledV1](e.Payload)
	if err != nil {
		return err
	}
	log := a.log.With("order_id", ev.OrderID, "event_id", e.EventID, "event_type", e.Type)
	reason := "order cancelled"
	if ev.Reason != "" {
		reason += ": " + ev.Reason
	}

	p, err := paymentdb.Lock(ctx, tx, ev.OrderID)
	if errors.Is(err, payment.ErrNotFound) {
		to, _ := payment.Next(payment.NoPayment, payment.Cancel)
		m := payment.Marker(ev.OrderID, "cancelled before inventory.reserved arrived ("+reason+")")
		m.Status = to
		err = paymentdb.InsertMarker(ctx, tx, m)
		if err == nil {
			log.WarnContext(ctx, "cancel arrived before inventory.reserved: nothing to refund; marker left so a late inventory.reserved charges nothing")
			return nil
		}
		if !errors.Is(err, paymentdb.ErrExists) {
			return err
		}
		// inventory.reserved committed its payment since we looked.
		p, err = paymentdb.Lock(ctx, tx, ev.OrderID)
	}
	if err != nil {
		return err
	}
	if _, ok := payment.Next(p.Status, payment.Cancel); !ok {
		log.InfoContext(ctx, "cancel: nothing to compensate", "status", p.Status)
		return nil
	}
	if p.CancelRequested {
		log.InfoContext(ctx, "cancel recorded already; nothing changed", "status", p.Status)
		return nil
	}
	moved, err := paymentdb.RequestCancel(ctx, tx, p.OrderID, p.Status, reason)
	if err != nil {
		return err
	}
	if !moved {
		return fmt.Errorf("payment %d changed under its row lock", p.OrderID)
	}
	p.CancelRequested, p.CancelReason = true, reason
	if !p.RefundDue() {
		log.InfoContext(ctx, "cancel recorded; the charge's outcome decides (a success is refunded at once)", "status", p.Status)
		return nil
	}
	ev2, err := a.requestRefund(ctx, tx, log, p, p.Version+1)
	if err != nil || ev2 == nil {
		return err
	}
	moved, err = paymentdb.Advance(ctx, tx, p.OrderID, p.Status, p.Version, p.Version+1)
	if err != nil {
		return err
	}
	if !moved {
		return fmt.Errorf("payment %d changed under its row lock", p.OrderID)
	}
	_, err = outbox.Add(ctx, tx, *ev2)
	return err
}
