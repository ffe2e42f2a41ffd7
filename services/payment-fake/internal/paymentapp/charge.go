package paymentapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/inbox/batch"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentdb"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp"
)

// ErrOutcomeUnresolved means the PSP's answer to a charge was lost (timeout,
// dropped connection, 5xx) and its status query did not settle it: the PSP
// has no charge with the key yet, or the query failed too. It is transient,
// never a decline: the consumer retries later with backoff, and the retry
// sends the charge again with the same idempotency key, which the PSP
// charges at most once. When the consumer gives up, the sweep carries on.
var ErrOutcomeUnresolved = errors.New("charge outcome not known yet")

// errNotCharged: a status query found no charge with the key.
var errNotCharged = errors.New("the PSP has no charge with this key")

// ChargeAtPSP is the inbox.ExternalHandler of payment.charge-requested
// (consumer "payment-psp"). It runs before the inbox transaction, with no
// transaction open and no lock held across the network call:
//
//  1. read the payment; if it is not pending (decided, parked, voided), do
//     not call the PSP;
//  2. if the order was cancelled meanwhile, do not start a charge: only ask
//     the PSP, with the key, whether an earlier attempt charged; found: that
//     is the outcome (a success is refunded at once); not found: nothing to
//     do, the sweep closes the payment at its deadline;
//  3. otherwise mark the charge sent (paymentdb.MarkChargeSent, a
//     compare-and-set that fails once the order is cancelled: a cancel that
//     came first has withdrawn the payment, and nothing is sent), then
//     charge at the PSP with the payment's idempotency key; on an
//     unknown outcome, query the charge by the same key; found: that is the
//     outcome; not found or query failed: ErrOutcomeUnresolved (retry later,
//     the attempt is noted on the payment as evidence); a 4xx refusal is
//     permanent (dead letter);
//  4. return the Handler that records the outcome in the inbox transaction.
//
// The inbox skips this whole function for an event it already committed, so
// a redelivery does not reach the PSP at all; a crash between the PSP call
// and the commit does, and the key makes that repeat call harmless.
func (a *App) ChargeAtPSP(ctx context.Context, e events.Envelope) (batch.Handler[Store], error) {
	req, err := events.Decode[events.PaymentChargeRequestedV1](e.Payload)
	if err != nil {
		return nil, err
	}
	log := a.requestLog(e, req.OrderID, req.IdempotencyKey)
	p, err := readRequested(ctx, a.db, paymentdb.Get, payment.ErrNotFound, "charge", "payment", req.OrderID)
	if err != nil {
		return nil, err
	}
	if p.IdempotencyKey != req.IdempotencyKey || p.AmountCents != req.AmountCents ||
		p.Currency != req.Currency || p.CustomerID != req.CustomerID {
		return nil, inbox.Permanent(fmt.Errorf("charge request for order %d (key %s, %d %s) does not match its payment (key %s, %d %s)",
			req.OrderID, req.IdempotencyKey, req.AmountCents, req.Currency, p.IdempotencyKey, p.AmountCents, p.Currency))
	}
	if p.Status != payment.Pending {
		log.InfoContext(ctx, "payment not pending; PSP not called", "status", p.Status)
		return noop, nil
	}

	var (
		call = a.chargeCall(chargeRequest(req))
		c    psp.Charge
	)
	if p.CancelRequested {
		c, err = call.status(ctx, nil)
		if errors.Is(err, errNotCharged) {
			log.InfoContext(ctx, "order cancelled while its charge was in flight; no charge started (the sweep settles it)")
			return noop, nil
		}
	} else {
		// Window: the payment is pending and not sent yet. A cancel now
		// withdraws it, and the mark below then fails.
		if err := failpoint.Inject(ctx, FailpointBeforeSend); err != nil {
			return nil, err
		}
		sent, merr := paymentdb.MarkChargeSent(ctx, a.db, req.OrderID)
		if merr != nil {
			return nil, merr
		}
		if !sent {
			log.InfoContext(ctx, "order cancelled (or payment decided) before the charge was sent; PSP not called")
			return noop, nil
		}
		c, err = call.do(ctx, log)
	}
	if err != nil {
		a.noteFailure(ctx, log, paymentdb.Charges, req.OrderID, err)
		return nil, err
	}
	return recordStep(ctx, FailpointAfterPSPCall, log, req.OrderID, c, a.recordCharge)
}

// noop is the record step of an event that changes nothing.
func noop(context.Context, Store, events.Envelope) error { return nil }

// chargeRequested is the charge request of payment p, as its
// payment.charge-requested event carries it.
func chargeRequested(p payment.Payment) events.PaymentChargeRequestedV1 {
	return events.PaymentChargeRequestedV1{OrderID: p.OrderID, CustomerID: p.CustomerID,
		AmountCents: p.AmountCents, Currency: p.Currency, IdempotencyKey: p.IdempotencyKey}
}

// chargeEvent is the payment.charge-requested of payment p, numbered
// version, event_id p.RequestEventID.
func chargeEvent(p payment.Payment, version uint64) outbox.Event {
	return outbox.Event{EventID: p.RequestEventID, AggregateID: p.OrderID, AggregateVersion: version,
		Type: events.PaymentChargeRequested, Payload: chargeRequested(p)}
}

func chargeRequest(req events.PaymentChargeRequestedV1) psp.ChargeRequest {
	return psp.ChargeRequest{
		IdempotencyKey: req.IdempotencyKey,
		OrderRef:       strconv.FormatUint(req.OrderID, 10),
		CustomerID:     req.CustomerID,
		AmountCents:    req.AmountCents,
		Currency:       req.Currency,
	}
}

// chargeCall is a charge at the PSP with the request's idempotency key, by
// the chapter's rule (keyedCall): a lost answer is followed by a status
// query with the same key, a 4xx refusal is permanent (dead letter).
func (a *App) chargeCall(creq psp.ChargeRequest) keyedCall[psp.Charge] {
	return keyedCall[psp.Charge]{
		what: "charge", callLabel: "charge", queryLabel: "status", key: creq.IdempotencyKey,
		call:   func(ctx context.Context) (psp.Charge, error) { return a.psp.Charge(ctx, creq) },
		query:  func(ctx context.Context) (psp.Charge, error) { return a.psp.GetCharge(ctx, creq.IdempotencyKey) },
		check:  func(c psp.Charge) (psp.Charge, error) { return checkCharge(c, creq) },
		found:  func(c psp.Charge) []any { return []any{"charge_id", c.ChargeID, "psp_status", c.Status} },
		absent: errNotCharged, unresolved: ErrOutcomeUnresolved,
		metrics: a.metrics,
	}
}

// checkCharge makes sure the PSP's record is the charge we asked for, with
// an outcome we understand. A mismatch is a broken contract with the PSP:
// no retry repairs it, a person must look (dead letter).
func checkCharge(c psp.Charge, req psp.ChargeRequest) (psp.Charge, error) {
	if c.IdempotencyKey != req.IdempotencyKey || c.OrderRef != req.OrderRef ||
		c.AmountCents != req.AmountCents || c.Currency != req.Currency {
		return psp.Charge{}, inbox.Permanent(fmt.Errorf("PSP charge %s (key %s, order %s, %d %s) does not match the request (key %s, order %s, %d %s)",
			c.ChargeID, c.IdempotencyKey, c.OrderRef, c.AmountCents, c.Currency,
			req.IdempotencyKey, req.OrderRef, req.AmountCents, req.Currency))
	}
	if _, ok := trigger(c); !ok {
		return psp.Charge{}, inbox.Permanent(fmt.Errorf("PSP charge %s has unknown status %q", c.ChargeID, c.Status))
	}
	return c, nil
}

// trigger translates the PSP's charge status into the domain's trigger.
func trigger(c psp.Charge) (payment.Trigger, bool) {
	switch c.Status {
	case psp.StatusSucceeded:
		return payment.ChargeSucceeded, true
	case psp.StatusDeclined:
		return payment.ChargeDeclined, true
	}
	return "", false
}

// recordCharge runs inside a transaction (the inbox transaction of
// "payment-psp", or the sweep's): lock the payment, ask the domain where
// the PSP's outcome leads, store the move (compare-and-set on the status
// read) with its result event, numbered with the payment's next aggregate
// version. A payment decided already changes nothing.
//
// If the order was cancelled while the charge was pending and the charge
// succeeded, the same transaction requests the refund: the customer is
// never left charged for a cancelled order, and no process can die between
// "charged" and "refund requested".
func (a *App) recordCharge(ctx context.Context, s Store, log *slog.Logger, orderID uint64, c psp.Charge) error {
	log = log.With("charge_id", c.ChargeID)
	p, err := s.LockPayment(ctx, orderID)
	if errors.Is(err, payment.ErrNotFound) {
		return inbox.Permanent(fmt.Errorf("charge outcome for order %d, which has no payment", orderID))
	}
	if err != nil {
		return err
	}
	t, _ := trigger(c) // checked in checkCharge
	to, ok := payment.Next(p.Status, t)
	if !ok {
		if p.PSPChargeID != c.ChargeID {
			log.WarnContext(ctx, "payment decided already with another charge; changed nothing",
				"status", p.Status, "recorded_charge_id", p.PSPChargeID)
		} else {
			log.InfoContext(ctx, "payment decided already; changed nothing", "status", p.Status)
		}
		return nil
	}

	from := p.Status
	p.Status, p.PSPChargeID = to, c.ChargeID
	out := outbox.Event{AggregateID: p.OrderID, AggregateVersion: p.Version + 1}
	d := paymentdb.Decision{From: from, To: to, PSPChargeID: c.ChargeID}
	switch to {
	case payment.Succeeded:
		out.Type = events.PaymentSucceeded
		out.Payload = events.PaymentSucceededV1{OrderID: p.OrderID, AmountCents: p.AmountCents,
			Currency: p.Currency, ChargeID: c.ChargeID}
	case payment.Failed:
		d.FailureReason = c.DeclineCode
		if d.FailureReason == "" {
			d.FailureReason = "declined"
		}
		out.Type = events.PaymentFailed
		out.Payload = events.PaymentFailedV1{OrderID: p.OrderID, Reason: d.FailureReason}
	default:
		return fmt.Errorf("payment %d: no event for status %s", p.OrderID, to)
	}
	evs := []outbox.Event{out}
	p.Version++
	if p.RefundDue() {
		ev, err := a.requestRefund(ctx, s, log, p, p.Version+1)
		if err != nil {
			return err
		}
		if ev != nil {
			evs = append(evs, *ev)
			p.Version++
		}
	}
	d.Version = p.Version

	moved, err := paymentdb.Decide(ctx, s.Tx(), p.OrderID, d)
	if err := underLock("payment", p.OrderID, moved, err); err != nil {
		return err
	}
	if err := s.Emit(ctx, evs...); err != nil {
		return err
	}
	log.InfoContext(ctx, "payment decided", "from", from, "to", to, "amount_cents", p.AmountCents,
		"failure_reason", d.FailureReason, "refund_requested", len(evs) > 1)
	return nil
}
