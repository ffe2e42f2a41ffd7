package paymentapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/inbox/batch"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentdb"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp"
)

// ErrRefundUnresolved is ErrOutcomeUnresolved for a refund: the PSP's
// answer was lost and its status query found no refund with the key (or
// failed). Transient: the consumer retries with backoff, the sweep after
// it, until the refund's deadline.
var ErrRefundUnresolved = errors.New("refund outcome not known yet")

// errNotRefunded: a status query found no refund with the key.
var errNotRefunded = errors.New("the PSP has no refund with this key")

// requestRefund writes the refund a payment owes (payment.RefundDue) and
// returns its payment.refund-requested event, numbered version, for the
// caller to add to the outbox with its own move. nil, nil: the order has a
// refund already (one per order): nothing new to request. Runs inside the
// caller's transaction, under the payment's row lock.
func (a *App) requestRefund(ctx context.Context, s Store, log *slog.Logger, p payment.Payment, version uint64) (*outbox.Event, error) {
	if _, ok := payment.NextRefund(payment.NoRefund, payment.RequestRefund); !ok || p.PSPChargeID == "" {
		return nil, fmt.Errorf("payment %d: no charge to refund", p.OrderID)
	}
	f := payment.NewRefund(p, p.CancelReason)
	var err error
	if f.RequestEventID, err = outbox.NewEventID(); err != nil { // kept on the refund: a later request corrects it
		return nil, err
	}
	err = paymentdb.InsertRefund(ctx, s.Tx(), f, a.cfg.RefundDeadline, a.cfg.Grace)
	if errors.Is(err, paymentdb.ErrRefundExists) {
		log.InfoContext(ctx, "refund requested already; nothing new", "idempotency_key", f.IdempotencyKey)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	a.countRefund(s, refundRequested)
	log.InfoContext(ctx, "refund requested", "idempotency_key", f.IdempotencyKey, "charge_id", f.PSPChargeID,
		"amount_cents", f.AmountCents)
	return refundEvent(f, version), nil
}

// refundEvent is the request of refund f, event_id f.RequestEventID.
func refundEvent(f payment.Refund, version uint64) *outbox.Event {
	return &outbox.Event{EventID: f.RequestEventID, AggregateID: f.OrderID, AggregateVersion: version, Type: events.PaymentRefundRequested,
		Payload: events.PaymentRefundRequestedV1{OrderID: f.OrderID, ChargeID: f.PSPChargeID,
			AmountCents: f.AmountCents, IdempotencyKey: f.IdempotencyKey}}
}

// RefundAtPSP is the inbox.ExternalHandler of payment.refund-requested
// (consumer "payment-refunds"), the compensation step. Like ChargeAtPSP it
// calls the PSP with no transaction open:
//
//  1. read the refund; if it is done or parked, do not call the PSP;
//  2. refund at the PSP with the key "refund-<order_id>"; on an unknown
//     outcome, query the refund by the same key; found: that is the
//     outcome; not found or query failed: ErrRefundUnresolved (retry later;
//     the failure is counted in payment_compensation_failures_total and
//     noted on the refund as evidence);
//  3. a 4xx refusal (the PSP will not refund this charge) cannot be retried
//     away: the refund is parked as needs_attention at once, with the
//     PSP's answer as evidence;
//  4. return the Handler that records the refund in the inbox transaction:
//     refund succeeded, payment refunded, payment.refunded to the order.
func (a *App) RefundAtPSP(ctx context.Context, e events.Envelope) (batch.Handler[Store], error) {
	req, err := events.Decode[events.PaymentRefundRequestedV1](e.Payload)
	if err != nil {
		return nil, err
	}
	log := a.requestLog(e, req.OrderID, req.IdempotencyKey)
	f, err := readRequested(ctx, a.db, paymentdb.GetRefund, paymentdb.ErrNoRefund, "refund", "refund", req.OrderID)
	if err != nil {
		return nil, err
	}
	if f.IdempotencyKey != req.IdempotencyKey || f.PSPChargeID != req.ChargeID || f.AmountCents != req.AmountCents {
		return nil, inbox.Permanent(fmt.Errorf("refund request for order %d (key %s, charge %s, %d) does not match its refund (key %s, charge %s, %d)",
			req.OrderID, req.IdempotencyKey, req.ChargeID, req.AmountCents, f.IdempotencyKey, f.PSPChargeID, f.AmountCents))
	}
	if f.Status != payment.RefundRequested {
		log.InfoContext(ctx, "refund not requested any more; PSP not called", "status", f.Status)
		return noop, nil
	}

	r, err := a.refundCall(refundRequest(f)).do(ctx, log)
	var refused *refusal
	switch {
	case err == nil:
	case errors.As(err, &refused):
		// Permanent, and a compensation cannot be dropped: an operator
		// takes it over.
		a.metrics.compensationFailures.Inc()
		reason := refused.Error()
		log.ErrorContext(ctx, "refund refused by the PSP; parking it for an operator", "err", err)
		return func(ctx context.Context, s Store, _ events.Envelope) error {
			_, err := a.parkRefund(ctx, s, s.Log(log), req.OrderID, reason, false)
			return err
		}, nil
	default:
		a.metrics.compensationFailures.Inc()
		a.noteFailure(ctx, log, paymentdb.Refunds, req.OrderID, err)
		return nil, err
	}
	return recordStep(ctx, FailpointAfterPSPRefund, log, req.OrderID, r, a.recordRefund)
}

func refundRequest(f payment.Refund) psp.RefundRequest {
	return psp.RefundRequest{IdempotencyKey: f.IdempotencyKey, ChargeID: f.PSPChargeID, AmountCents: f.AmountCents}
}

// refundCall is a refund at the PSP with the refund's idempotency key, by
// the chapter's rule (keyedCall): a lost answer is followed by a status
// query with the same key; a 4xx refusal parks the refund (RefundAtPSP).
func (a *App) refundCall(req psp.RefundRequest) keyedCall[psp.Refund] {
	return keyedCall[psp.Refund]{
		what: "refund", callLabel: "refund", queryLabel: "refund_status", key: req.IdempotencyKey,
		call:   func(ctx context.Context) (psp.Refund, error) { return a.psp.Refund(ctx, req) },
		query:  func(ctx context.Context) (psp.Refund, error) { return a.psp.GetRefund(ctx, req.IdempotencyKey) },
		check:  func(r psp.Refund) (psp.Refund, error) { return checkRefund(r, req) },
		found:  func(r psp.Refund) []any { return []any{"refund_id", r.RefundID} },
		absent: errNotRefunded, unresolved: ErrRefundUnresolved,
		metrics: a.metrics,
	}
}

// checkRefund makes sure the PSP's record is the refund we asked for.
func checkRefund(r psp.Refund, req psp.RefundRequest) (psp.Refund, error) {
	if r.IdempotencyKey != req.IdempotencyKey || r.ChargeID != req.ChargeID || r.AmountCents != req.AmountCents ||
		r.Status != psp.StatusSucceeded {
		return psp.Refund{}, inbox.Permanent(fmt.Errorf("PSP refund %s (key %s, charge %s, %d, %s) does not match the request (key %s, charge %s, %d)",
			r.RefundID, r.IdempotencyKey, r.ChargeID, r.AmountCents, r.Status, req.IdempotencyKey, req.ChargeID, req.AmountCents))
	}
	return r, nil
}

// recordRefund runs inside a transaction (the inbox transaction of
// "payment-refunds", or the sweep's): lock the payment, then its refund;
// refund -> succeeded and payment succeeded -> refunded, both
// compare-and-set, and payment.refunded for the order service, numbered
// with the payment's next version. A refund recorded already changes
// nothing.
func (a *App) recordRefund(ctx context.Context, s Store, log *slog.Logger, orderID uint64, r psp.Refund) error {
	tx := s.Tx()
	log = log.With("refund_id", r.RefundID)
	p, err := s.LockPayment(ctx, orderID)
	if err != nil {
		return err
	}
	f, err := paymentdb.LockRefund(ctx, tx, orderID)
	if err != nil {
		return err
	}
	if _, ok := payment.NextRefund(f.Status, payment.RefundDone); !ok {
		log.InfoContext(ctx, "refund recorded already; changed nothing", "status", f.Status)
		return nil
	}
	if _, ok := payment.Next(p.Status, payment.RefundCompleted); !ok {
		// A refund exists only for a succeeded payment, and only a refund
		// moves it on: the tables disagree, and retrying cannot fix that.
		return inbox.Permanent(fmt.Errorf("refund %s of order %d: payment is %s, not succeeded", r.RefundID, orderID, p.Status))
	}
	moved, err := paymentdb.RefundDone(ctx, tx, orderID, f.Status, r.RefundID)
	if err != nil {
		return err
	}
	version := p.Version + 1
	if moved {
		moved, err = paymentdb.Refunded(ctx, tx, orderID, version)
	}
	if err != nil {
		return err
	}
	if !moved {
		return fmt.Errorf("payment %d or its refund changed under the row locks", orderID)
	}
	err = s.Emit(ctx, outbox.Event{AggregateID: orderID, AggregateVersion: version, Type: events.PaymentRefunded,
		Payload: events.PaymentRefundedV1{OrderID: orderID, AmountCents: r.AmountCents, RefundID: r.RefundID}})
	if err != nil {
		return err
	}
	a.countRefund(s, refundSucceeded)
	log.InfoContext(ctx, "refunded", "amount_cents", r.AmountCents, "charge_id", r.ChargeID, "from", f.Status)
	return nil
}

// parkRefund parks a requested refund as needs_attention with the reason
// (pastDeadline: only if its deadline has passed, database time), and
// reports whether it did. Inside a transaction, under the payment's and the
// refund's row locks.
func (a *App) parkRefund(ctx context.Context, s Store, log *slog.Logger, orderID uint64, reason string, pastDeadline bool) (bool, error) {
	tx := s.Tx()
	if _, err := paymentdb.Lock(ctx, tx, orderID); err != nil {
		return false, err
	}
	f, err := paymentdb.LockRefund(ctx, tx, orderID)
	if err != nil {
		return false, err
	}
	if _, ok := payment.NextRefund(f.Status, payment.RefundPark); !ok {
		log.InfoContext(ctx, "refund not requested any more; not parked", "status", f.Status)
		return false, nil
	}
	moved, err := paymentdb.ParkRefund(ctx, tx, orderID, reason, pastDeadline)
	if err != nil || !moved {
		return false, err
	}
	// Counted when written (see requestRefund).
	a.countRefund(s, refundNeedsAttention)
	log.ErrorContext(ctx, "refund parked as needs_attention", "reason", reason, "attempts", f.Attempts,
		"last_error", f.LastError)
	return true, nil
}

// countRefund counts a refund's step once its transaction has committed: a
// transaction rolled back and replayed (a consumer batch's, a failed
// commit's) counts it once.
func (a *App) countRefund(s Store, step string) {
	sqldb.AfterCommit(s.Tx(), func() { a.metrics.refunds.WithLabelValues(step).Inc() })
}
