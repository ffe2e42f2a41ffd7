package paymentapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentdb"
)

// The sweep is the persistent driver of every PSP step whose outcome is
// still open: payments pending and refunds requested. The consumers make
// the first attempts within milliseconds; their retries are bounded, a
// message can be dead-lettered, a process can die. The sweep does not
// depend on any of that: it reads the tables.
//
// One round (Sweep):
//
//  1. claim: in one short transaction, select up to SweepBatch due rows
//     (status open, next_attempt_at <= NOW(6)) FOR UPDATE SKIP LOCKED and
//     move each one's next_attempt_at forward by its backoff. Concurrent
//     sweeps, in this process or another, skip the locked rows and, once
//     committed, no longer see them as due: each row is worked by one
//     sweep per backoff window;
//  2. for each claimed row, outside any transaction: ask the PSP with the
//     step's idempotency key (a status query never charges or refunds);
//  3. decide, in a transaction per row, compare-and-set on the status:
//     found: record the outcome exactly as the consumer would; not found and
//     before the deadline: re-request the step (a new outbox event, same
//     key, so the PSP still charges or refunds at most once; a cancelled
//     order is never charged anew); past the deadline: park it as
//     needs_attention with the evidence (or, for a cancelled order the PSP
//     never charged, close it as cancelled_before_charge); query failed:
//     note the evidence and wait for the next round, or park it past the
//     deadline.

// SweepCounts is what one round did with the rows of one kind.
type SweepCounts struct {
	Claimed     int // due rows this round took
	Resolved    int // the PSP had a record: outcome recorded
	Rerequested int // the PSP had no record: step requested again
	Parked      int // past the deadline: needs_attention
	Voided      int // cancelled order never charged: cancelled_before_charge
	Waiting     int // nothing to do this round (query failed, or a cancelled order before its deadline)
	Errors      int // rows whose handling failed; they come back next round
}

// SweepReport is what one round did.
type SweepReport struct {
	Charges SweepCounts
	Refunds SweepCounts
}

// RunSweeper runs a sweep round every interval until ctx ends. A failed
// round is logged; the next one tries again.
func (a *App) RunSweeper(ctx context.Context, interval time.Duration) error {
	retry.EveryFromNow(ctx, interval, func() {
		rep, err := a.Sweep(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			a.log.WarnContext(ctx, "sweep round failed", "err", err)
		case rep.Charges.Claimed+rep.Refunds.Claimed > 0:
			a.log.InfoContext(ctx, "sweep round", "charges", rep.Charges, "refunds", rep.Refunds)
		}
	})
	return nil
}

// Sweep runs one round over the due payments, then the due refunds. Errors
// on single rows are logged and counted (the row comes back next round);
// the returned error is a failed claim.
func (a *App) Sweep(ctx context.Context) (SweepReport, error) {
	var rep SweepReport
	if err := a.sweepRows(ctx, paymentdb.Charges, "payments", "charge", a.sweepCharge, &rep.Charges); err != nil {
		return rep, err
	}
	if err := a.sweepRows(ctx, paymentdb.Refunds, "refunds", "refund", a.sweepRefund, &rep.Refunds); err != nil {
		return rep, err
	}
	if rep.Charges.Rerequested+rep.Charges.Resolved+rep.Refunds.Rerequested+rep.Refunds.Resolved > 0 {
		a.cfg.Wake()
	}
	return rep, nil
}

// sweepRows claims the due rows of one step (table: its table, kind: the
// "kind" label) and sweeps each with sweep, counting what it did in c.
func (a *App) sweepRows(ctx context.Context, step paymentdb.Step, table, kind string,
	sweep func(context.Context, paymentdb.Due) (string, error), c *SweepCounts) error {
	due, err := a.claim(ctx, step)
	if err != nil {
		return fmt.Errorf("claim %s: %w", table, err)
	}
	c.Claimed = len(due)
	for _, d := range due {
		action, err := sweep(ctx, d)
		a.count(ctx, kind, d, action, err, c)
	}
	return nil
}

// sweep actions, the "action" label of payment_sweep_actions_total.
const (
	actResolved    = "resolved"
	actRerequested = "rerequested"
	actParked      = "parked"
	actVoided      = "voided"
	actWaiting     = "waiting"
	actError       = "error"
)

func (a *App) count(ctx context.Context, kind string, d paymentdb.Due, action string, err error, c *SweepCounts) {
	if err != nil {
		action = actError
		a.log.WarnContext(ctx, "sweep: row failed; it comes back next round", "kind", kind, "order_id", d.OrderID, "err", err)
	}
	a.metrics.sweep.WithLabelValues(kind, action).Inc()
	switch action {
	case actResolved:
		c.Resolved++
	case actRerequested:
		c.Rerequested++
	case actParked:
		c.Parked++
	case actVoided:
		c.Voided++
	case actWaiting:
		c.Waiting++
	case actError:
		c.Errors++
	}
}

// sweepTx runs fn, a sweep's move of one row, in one transaction
// (sqldb.WithTxRetry; a COMMIT with an unknown outcome is tried again only
// when idempotent) and returns the action of the attempt that ran last.
func (a *App) sweepTx(ctx context.Context, idempotent bool, fn func(*sqlx.Tx) (string, error)) (string, error) {
	var action string
	err := sqldb.WithTxRetry(ctx, a.db, a.txRetry(idempotent), func(tx *sqlx.Tx) error {
		var err error
		action, err = fn(tx)
		return err
	})
	return action, err
}

// claim takes this round's due rows of one table in one short transaction:
// select them with SKIP LOCKED, push each one's next round out by its
// backoff, commit.
func (a *App) claim(ctx context.Context, step paymentdb.Step) ([]paymentdb.Due, error) {
	var claimed []paymentdb.Due
	// Idempotent: after a COMMIT with an unknown outcome, a second claim
	// finds the rows of the first no longer due; they come back at their
	// next round.
	err := sqldb.WithTxRetry(ctx, a.db, a.txRetry(true), func(tx *sqlx.Tx) error {
		claimed = claimed[:0]
		due, err := step.SelectDue(ctx, tx, a.cfg.SweepBatch)
		if err != nil {
			return err
		}
		for _, d := range due {
			ok, err := step.Reschedule(ctx, tx, d.OrderID, a.cfg.Backoff.Delay(d.Rounds+1))
			if err != nil {
				return err
			}
			if ok {
				claimed = append(claimed, d)
			}
		}
		return nil
	})
	return claimed, err
}

// sweepCharge works one claimed pending payment.
func (a *App) sweepCharge(ctx context.Context, d paymentdb.Due) (string, error) {
	p, err := paymentdb.Get(ctx, a.db, d.OrderID)
	if err != nil {
		return "", err
	}
	log := a.log.With("order_id", p.OrderID, "idempotency_key", p.IdempotencyKey, "component", "sweep")
	if p.Status != payment.Pending {
		return actWaiting, nil // decided since the claim
	}
	c, err := a.chargeCall(chargeRequest(chargeRequested(p))).status(ctx, nil)
	switch {
	case err == nil:
		log.InfoContext(ctx, "sweep: the PSP has the charge; recording it", "charge_id", c.ChargeID, "psp_status", c.Status)
		err := sqldb.WithTxRetry(ctx, a.db, a.txRetry(true), func(tx *sqlx.Tx) error { return a.recordCharge(ctx, Direct(tx), log, p.OrderID, c) })
		return actResolved, err

	case errors.Is(err, errNotCharged):
		if d.PastDeadline {
			t := payment.AtDeadline(p, true)
			reason := fmt.Sprintf("no charge with key %s at the PSP at the deadline %s; %d unresolved attempts; last error: %s",
				p.IdempotencyKey, p.DeadlineAt.Format(time.RFC3339), p.Attempts, orNone(p.LastError))
			if t == payment.Void {
				reason = fmt.Sprintf("%s, and the PSP has no charge with key %s at the deadline: nothing charged",
					p.CancelReason, p.IdempotencyKey)
			}
			return a.parkCharge(ctx, log, p.OrderID, t, reason)
		}
		if p.CancelRequested {
			// Never start a charge for a cancelled order: close it once
			// the charge sent before the cancel can no longer land.
			return a.voidSettled(ctx, log, p)
		}
		return a.rerequestCharge(ctx, log, p.OrderID)

	default:
		a.noteFailure(ctx, log, paymentdb.Charges, p.OrderID, err)
		if d.PastDeadline {
			reason := fmt.Sprintf("charge outcome unknown at the deadline %s: status query with key %s failed: %v; %d earlier unresolved attempts",
				p.DeadlineAt.Format(time.RFC3339), p.IdempotencyKey, err, p.Attempts)
			return a.parkCharge(ctx, log, p.OrderID, payment.Park, reason)
		}
		return actWaiting, nil
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// parkCharge moves a payment still pending past its deadline to where
// trigger t (Park or Void) leads, with the reason.
func (a *App) parkCharge(ctx context.Context, log *slog.Logger, orderID uint64, t payment.Trigger, reason string) (string, error) {
	return a.sweepTx(ctx, true, func(tx *sqlx.Tx) (string, error) {
		p, err := paymentdb.Lock(ctx, tx, orderID)
		if err != nil {
			return "", err
		}
		to, ok := payment.Next(p.Status, t)
		if !ok {
			return actWaiting, nil
		}
		moved, err := paymentdb.Park(ctx, tx, orderID, to, reason)
		if err != nil {
			return "", err
		}
		if !moved {
			return actWaiting, nil // the deadline was moved (an operator's retry)
		}
		if to == payment.NeedsAttention {
			log.ErrorContext(ctx, "payment parked as needs_attention", "reason", reason, "attempts", p.Attempts,
				"last_error", p.LastError)
			return actParked, nil
		}
		log.WarnContext(ctx, "cancelled order closed: the PSP never charged it", "status", to, "reason", reason)
		return actVoided, nil
	})
}

// voidSettled closes the pending payment p of a cancelled order as
// cancelled_before_charge once its last send to the PSP is older than the
// in-flight window (CancelSettle) and the PSP has no charge with its key:
// the charge never landed. Before that it waits (the cancel brought the
// sweep's next look to the end of the window). A charge that lands later
// after all is still recorded, and refunded.
func (a *App) voidSettled(ctx context.Context, log *slog.Logger, p payment.Payment) (string, error) {
	reason := fmt.Sprintf("%s, and the PSP has no charge with key %s %s after it was last sent: nothing charged",
		p.CancelReason, p.IdempotencyKey, a.cfg.CancelSettle)
	return a.sweepTx(ctx, true, func(tx *sqlx.Tx) (string, error) {
		cur, err := paymentdb.Lock(ctx, tx, p.OrderID)
		if err != nil {
			return "", err
		}
		to, ok := payment.Next(cur.Status, payment.Void)
		if !ok || !cur.CancelRequested {
			return actWaiting, nil
		}
		moved, err := paymentdb.VoidSettled(ctx, tx, p.OrderID, to, reason, a.cfg.CancelSettle)
		if err != nil || !moved {
			return actWaiting, err // still inside the window: the next round
		}
		log.WarnContext(ctx, "cancelled order's charge settled: the PSP never charged it", "status", to, "reason", reason)
		return actVoided, nil
	})
}

// rerequestCharge writes a new payment.charge-requested for a payment
// still pending and not cancelled, the same idempotency key. It is a
// correction, not a replay (addChargeRequest): the status query found no
// charge, and asking again is the sweep's own decision, so it is a new
// event with a new id that names the request it corrects. The earlier
// request is a dead letter or lost by now, or was processed without a
// charge; whatever became of it, its id is not reused, so no inbox can
// take the new request for a copy of it, and the earlier one, if an
// operator redrives it later, is still itself (it finds the payment
// decided, or charges with the same key).
func (a *App) rerequestCharge(ctx context.Context, log *slog.Logger, orderID uint64) (string, error) {
	// Not idempotent (each run writes a new request event): a COMMIT with
	// an unknown outcome is left to the next round.
	return a.sweepTx(ctx, false, func(tx *sqlx.Tx) (string, error) {
		p, err := paymentdb.Lock(ctx, tx, orderID)
		if err != nil {
			return "", err
		}
		if p.Status != payment.Pending || p.CancelRequested {
			return actWaiting, nil
		}
		ids, err := a.addChargeRequest(ctx, tx, p)
		if err != nil {
			return "", err
		}
		log.WarnContext(ctx, "sweep: the PSP has no charge with the key; charge requested again with the same key",
			"event_id", ids[0], "aggregate_version", p.Version+1, "attempts", p.Attempts)
		return actRerequested, nil
	})
}

// addChargeRequest writes a new payment.charge-requested for the locked
// pending payment p, numbered with its next version: a correction of the
// payment's latest request (p.RequestEventID, "" for a payment from
// before the link was kept), with an event id of its own, which becomes
// the latest. The sweep's re-request and an operator's retry both use it.
func (a *App) addChargeRequest(ctx context.Context, tx *sqlx.Tx, p payment.Payment) ([]string, error) {
	return addCorrection(ctx, tx, p, paymentdb.Charges, chargeEvent(p, p.Version+1))
}

// addCorrection writes ev, the latest request of step (charge or refund)
// of the locked payment p numbered with p's next version, again as a
// correction of it: with an event id of its own, which the step keeps as
// its latest request, naming ev.EventID ("" for none kept) as the one it
// corrects. The payment's version moves on with it.
func addCorrection(ctx context.Context, tx *sqlx.Tx, p payment.Payment, step paymentdb.Step, ev outbox.Event) ([]string, error) {
	moved, err := paymentdb.Advance(ctx, tx, p.OrderID, p.Status, p.Version, p.Version+1)
	if err := underLock("payment", p.OrderID, moved, err); err != nil {
		return nil, err
	}
	ev.Corrects = ev.EventID
	if ev.EventID, err = outbox.NewEventID(); err != nil {
		return nil, err
	}
	if err := step.NewRequest(ctx, tx, p.OrderID, ev.EventID); err != nil {
		return nil, err
	}
	return outbox.Add(ctx, tx, ev)
}

// sweepRefund works one claimed requested refund.
func (a *App) sweepRefund(ctx context.Context, d paymentdb.Due) (string, error) {
	f, err := paymentdb.GetRefund(ctx, a.db, d.OrderID)
	if err != nil {
		return "", err
	}
	log := a.log.With("order_id", f.OrderID, "idempotency_key", f.IdempotencyKey, "component", "sweep")
	if f.Status != payment.RefundRequested {
		return actWaiting, nil
	}
	r, err := a.refundCall(refundRequest(f)).status(ctx, nil)
	switch {
	case err == nil:
		log.InfoContext(ctx, "sweep: the PSP has the refund; recording it", "refund_id", r.RefundID)
		err := sqldb.WithTxRetry(ctx, a.db, a.txRetry(true), func(tx *sqlx.Tx) error { return a.recordRefund(ctx, Direct(tx), log, f.OrderID, r) })
		return actResolved, err

	case errors.Is(err, errNotRefunded):
		if d.PastDeadline {
			reason := fmt.Sprintf("no refund with key %s at the PSP at the deadline %s; %d failed attempts; last error: %s",
				f.IdempotencyKey, f.DeadlineAt.Format(time.RFC3339), f.Attempts, orNone(f.LastError))
			return a.parkRefundNow(ctx, log, f.OrderID, reason)
		}
		return a.rerequestRefund(ctx, log, f.OrderID)

	default:
		a.metrics.compensationFailures.Inc()
		a.noteFailure(ctx, log, paymentdb.Refunds, f.OrderID, err)
		if d.PastDeadline {
			reason := fmt.Sprintf("refund outcome unknown at the deadline %s: status query with key %s failed: %v; %d earlier failed attempts",
				f.DeadlineAt.Format(time.RFC3339), f.IdempotencyKey, err, f.Attempts)
			return a.parkRefundNow(ctx, log, f.OrderID, reason)
		}
		return actWaiting, nil
	}
}

func (a *App) parkRefundNow(ctx context.Context, log *slog.Logger, orderID uint64, reason string) (string, error) {
	return a.sweepTx(ctx, true, func(tx *sqlx.Tx) (string, error) {
		parked, err := a.parkRefund(ctx, Direct(tx), log, orderID, reason, true)
		if parked {
			return actParked, err
		}
		return actWaiting, err
	})
}

// rerequestRefund writes a new payment.refund-requested for a refund still
// requested, the same idempotency key: a compensation issued again after
// the fact, so a correction of the request before it (addRefundRequest),
// for the reasons given at rerequestCharge.
func (a *App) rerequestRefund(ctx context.Context, log *slog.Logger, orderID uint64) (string, error) {
	// Not idempotent (each run writes a new request event): a COMMIT with
	// an unknown outcome is left to the next round.
	return a.sweepTx(ctx, false, func(tx *sqlx.Tx) (string, error) {
		p, err := paymentdb.Lock(ctx, tx, orderID)
		if err != nil {
			return "", err
		}
		f, err := paymentdb.LockRefund(ctx, tx, orderID)
		if err != nil {
			return "", err
		}
		if f.Status != payment.RefundRequested {
			return actWaiting, nil
		}
		ids, err := a.addRefundRequest(ctx, tx, p, f)
		if err != nil {
			return "", err
		}
		log.WarnContext(ctx, "sweep: the PSP has no refund with the key; refund requested again with the same key",
			"event_id", ids[0], "attempts", f.Attempts, "last_error", f.LastError)
		return actRerequested, nil
	})
}

// addRefundRequest writes a new payment.refund-requested for refund f of
// the locked payment p, numbered with the payment's next version: a
// correction of the refund's latest request (f.RequestEventID), with an
// event id of its own, which becomes the latest. The sweep's re-request
// and an operator's retry both use it.
func (a *App) addRefundRequest(ctx context.Context, tx *sqlx.Tx, p payment.Payment, f payment.Refund) ([]string, error) {
	return addCorrection(ctx, tx, p, paymentdb.Refunds, *refundEvent(f, p.Version+1))
}
