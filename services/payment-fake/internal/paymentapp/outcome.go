package paymentapp

import (
	"context"
	"errors"
	"fmt"

	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentdb"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp"
)

// What Outcome answers about an order's charge (the order service's
// deadline sweep decides from it).
const (
	OutcomeSucceeded  = "succeeded"   // charged
	OutcomeDeclined   = "declined"    // the PSP declined: nothing charged
	OutcomeRefunded   = "refunded"    // charged and paid back
	OutcomeNotCharged = "not_charged" // never sent to the PSP, or closed without a charge
	OutcomeUnknown    = "unknown"     // sent, and the PSP has no record yet (in flight), or could not be asked
)

// Where an Outcome comes from.
const (
	SourceRecord = "record" // the payment's own, decided record
	SourcePSP    = "psp"    // a status query by the charge's idempotency key
)

// Outcome is what became of an order's charge, as far as can be known now.
type Outcome struct {
	Outcome       string
	Source        string
	PaymentStatus payment.Status
	PSPChargeID   string
	Detail        string
}

// Outcome answers "what became of this order's charge?" for the order
// service, which asks before it cancels an order at its payment deadline
// (扣款超时结果未知时，先查询，而不是直接取消). A decided payment answers from its
// record. A pending or parked one asks the PSP by the charge's idempotency
// key (a status query: it never charges) and reports what the PSP has,
// without recording it: the consumer and the sweep record outcomes, in
// their transactions. payment.ErrNotFound: no payment for the order.
func (a *App) Outcome(ctx context.Context, orderID uint64) (Outcome, error) {
	p, err := paymentdb.Get(ctx, a.db, orderID)
	if err != nil {
		return Outcome{}, err
	}
	out := Outcome{Source: SourceRecord, PaymentStatus: p.Status, PSPChargeID: p.PSPChargeID}
	switch p.Status {
	case payment.Succeeded:
		out.Outcome, out.Detail = OutcomeSucceeded, "the payment recorded the charge"
		return out, nil
	case payment.Failed:
		out.Outcome, out.Detail = OutcomeDeclined, "the PSP declined: "+p.FailureReason
		return out, nil
	case payment.Refunded:
		out.Outcome, out.Detail = OutcomeRefunded, "charged and refunded"
		return out, nil
	case payment.Withdrawn, payment.CancelledBeforeCharge:
		out.Outcome, out.Detail = OutcomeNotCharged, "closed without a charge ("+string(p.Status)+")"
		return out, nil
	}
	// Pending or parked: the record does not know. Ask the PSP.
	c, err := a.chargeCall(chargeRequest(chargeRequested(p))).status(ctx, nil)
	out.Source = SourcePSP
	switch {
	case err == nil && c.Status == psp.StatusSucceeded:
		out.Outcome, out.PSPChargeID = OutcomeSucceeded, c.ChargeID
		out.Detail = fmt.Sprintf("the PSP has a succeeded charge with key %s; the payment records it next", p.IdempotencyKey)
	case err == nil:
		out.Outcome, out.PSPChargeID = OutcomeDeclined, c.ChargeID
		out.Detail = fmt.Sprintf("the PSP declined the charge with key %s (%s)", p.IdempotencyKey, c.DeclineCode)
	case errors.Is(err, errNotCharged) && !p.ChargeSent:
		out.Outcome = OutcomeNotCharged
		out.Detail = fmt.Sprintf("the charge was never sent, and the PSP has none with key %s", p.IdempotencyKey)
	case errors.Is(err, errNotCharged):
		out.Outcome = OutcomeUnknown
		out.Detail = fmt.Sprintf("the charge was sent and the PSP has none with key %s yet: it may still land", p.IdempotencyKey)
	default:
		out.Outcome = OutcomeUnknown
		out.Detail = "the PSP could not be asked: " + err.Error()
	}
	return out, nil
}
