package paymentapp

import (
	"context"
	"errors"
	"log/slog"

	"github.com/relmsg/ordersaga/pkg/base/events"
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
//   - pending (or parked), and the charge never sent to the PSP
//     (charge_sent_at NULL):
//     withdrawn at once, a terminal status: nothing was charged, and
//     nothing will be, because the charge consumer sends a charge only
//     under a compare-and-set (paymentdb.MarkChargeSent) that a cancelled
//     payment fails. The row lock orders the two: whichever commits first
//     decides;
//   - pending with the charge sent (in flight), or needs_attention (the
//     outcome is not known): the cancel is remembered
//     (cancel_requested_at). A cancel is no reason to abandon an outcome:
//     whoever learns it records it, and a success is refunded in that same
//     transaction. No new charge is started for the order (ChargeAtPSP only
//     queries), and the sweep's next look comes within the in-flight
//     window (CancelSettle): a status query by the key records what the
//     PSP has, or, when it has nothing once the window is over, closes the
//     payment as cancelled_before_charge;
//   - succeeded: the refund is requested now (a refunds row and
//     payment.refund-requested, one transaction);
//   - failed, refunded, cancelled_before_charge: nothing to compensate.
func (a *App) OnOrderCancelled(ctx context.Context, s Store, e events.Envelope) error {
	ev, err := events.Decode[events.OrderCancelledV1](e.Payload)
	if err != nil {
		return err
	}
	tx := s.Tx()
	log := s.Log(a.log).With("order_id", ev.OrderID, "event_id", e.EventID, "event_type", e.Type)
	reason := "order cancelled"
	if ev.Reason != "" {
		reason += ": " + ev.Reason
	}

	p, found, err := a.paymentOrMarker(ctx, s, log, ev.OrderID, reason)
	if err != nil || !found {
		return err
	}
	if p.CancelTrigger() == payment.Withdraw {
		to, _ := payment.Next(p.Status, payment.Withdraw)
		moved, err := paymentdb.Withdraw(ctx, tx, p.OrderID, p.Status, to, reason)
		if err := underLock("payment", p.OrderID, moved, err); err != nil {
			return err
		}
		log.InfoContext(ctx, "cancel arrived before the charge was sent to the PSP: payment withdrawn, nothing charged",
			"status", to)
		return nil
	}
	if _, ok := payment.Next(p.Status, payment.Cancel); !ok {
		log.InfoContext(ctx, "cancel: nothing to compensate", "status", p.Status)
		return nil
	}
	return a.requestCancel(ctx, s, log, p, reason)
}

// paymentOrMarker locks the order's payment; found is false when there is
// none yet (the cancel overtook inventory.reserved): then a marker row in
// status cancelled_before_charge is left, so that the late
// inventory.reserved finds the order id taken and charges nothing.
func (a *App) paymentOrMarker(ctx context.Context, s Store, log *slog.Logger, orderID uint64, reason string) (payment.Payment, bool, error) {
	p, err := s.LockPayment(ctx, orderID)
	if !errors.Is(err, payment.ErrNotFound) {
		return p, err == nil, err
	}
	to, _ := payment.Next(payment.NoPayment, payment.Cancel)
	m := payment.Marker(orderID, "cancelled before inventory.reserved arrived ("+reason+")")
	m.Status = to
	err = paymentdb.InsertMarker(ctx, s.Tx(), m)
	if err == nil {
		log.WarnContext(ctx, "cancel arrived before inventory.reserved: nothing to refund; marker left so a late inventory.reserved charges nothing")
		return payment.Payment{}, false, nil
	}
	if !errors.Is(err, paymentdb.ErrExists) {
		return payment.Payment{}, false, err
	}
	// inventory.reserved committed its payment since we looked.
	p, err = paymentdb.Lock(ctx, s.Tx(), orderID)
	return p, err == nil, err
}

// requestCancel remembers the cancel of a payment whose charge is in
// flight, decided or parked, and requests the refund of a succeeded one
// (a refunds row and payment.refund-requested, in this transaction).
func (a *App) requestCancel(ctx context.Context, s Store, log *slog.Logger, p payment.Payment, reason string) error {
	tx := s.Tx()
	if p.CancelRequested {
		log.InfoContext(ctx, "cancel recorded already; nothing changed", "status", p.Status)
		return nil
	}
	moved, err := paymentdb.RequestCancel(ctx, tx, p.OrderID, p.Status, reason)
	if err := underLock("payment", p.OrderID, moved, err); err != nil {
		return err
	}
	p.CancelRequested, p.CancelReason = true, reason
	if p.Status == payment.Pending {
		// In flight: settle it by a status query once the send's answer
		// has had time to arrive.
		if err := paymentdb.SettleSoon(ctx, tx, p.OrderID, a.cfg.CancelSettle); err != nil {
			return err
		}
	}
	if !p.RefundDue() {
		log.InfoContext(ctx, "cancel recorded; the charge's outcome decides (a success is refunded at once)", "status", p.Status)
		return nil
	}
	ev2, err := a.requestRefund(ctx, s, log, p, p.Version+1)
	if err != nil || ev2 == nil {
		return err
	}
	moved, err = paymentdb.Advance(ctx, tx, p.OrderID, p.Status, p.Version, p.Version+1)
	if err := underLock("payment", p.OrderID, moved, err); err != nil {
		return err
	}
	return s.Emit(ctx, *ev2)
}
