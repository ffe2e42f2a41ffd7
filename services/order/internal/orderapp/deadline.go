package orderapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
)

// The deadline sweep: the persistent timer of the saga. An order waiting in
// pending_inventory or awaiting_payment carries deadline_at, set by the
// UPDATE that moved it there (database time, see order.Deadlines) and
// cleared by the move out. Nothing is kept in memory: a restarted process,
// or another instance, finds the same deadlines in the table.
//
// One round (ExpireDeadlines):
//
//	SELECT id, status FROM orders WHERE deadline_at <= NOW(6)  -- candidates, no lock
//	  ORDER BY deadline_at LIMIT batch
//	per order in awaiting_payment, no transaction open:
//	  GET /payments/{id}/outcome                                -- ask before cancelling: payment
//	  order.AtPaymentDeadline                                   --   answers from its record or the PSP
//	  wait: UPDATE orders SET deadline_at = NOW(6) + recheck    -- compare-and-set; asked again later
//	    WHERE id = ? AND status = ? AND deadline_at <= NOW(6)
//	per order to cancel, one transaction:
//	  SELECT ... WHERE id = ? AND deadline_at <= NOW(6)        -- re-check under the row lock;
//	    FOR UPDATE SKIP LOCKED                                 -- a row someone else holds is skipped
//	  CancelRequested, reason from the state                   -- the customer cancel's decision:
//	  UPDATE orders ... WHERE id = ? AND status = ?            --   compare-and-set, deadline cleared
//	  INSERT order_history, outbox.Add (OrderCancelled)
//	COMMIT, wake the dispatcher
//
// The chapter asks how a charge whose outcome is unknown at the deadline is
// looked up rather than cancelled blindly (扣款超时结果未知时，如何查询，而不是
// 直接取消): payment is asked first, and it asks the PSP by the charge's
// idempotency key when its own record is not decided. A paid order is never
// cancelled by its deadline; an unknown outcome is waited for, asking again
// every Recheck, until Deadlines.GiveUp, and only then cancelled (a charge
// that lands later is refunded). The order's payment deadline comes
// PaymentMargin after the payment service's own, so payment has parked or
// closed its side before the order asks.
//
// OrderCancelled makes inventory release the reservation (or leave a marker
// if it never saw the order) and payment withdraw a charge not sent yet,
// or refund what it charged.
//
// Several sweepers (goroutines, instances) may propose the same order: the
// first one locks it; the others skip it while it is locked, and after the
// commit no longer find it past its deadline. A consumer applying a result
// at the same moment holds the same row lock: whichever commits first wins,
// the other sees its outcome (a payment that succeeds after the deadline
// cancel is refunded, see order.Refund).

// FailpointDeadlineBeforeCancel: a sweeper has read its candidates and has
// not locked this one yet.
const FailpointDeadlineBeforeCancel = "order.deadline.before-cancel"

func init() {
	failpoint.Register(FailpointDeadlineBeforeCancel, "the deadline sweep read an order past its deadline and has not "+
		"locked it yet: another sweeper, a result or a customer cancel may move it now; the order is cancelled once")
}

// DeadlineRound is what one round of the sweep did.
type DeadlineRound struct {
	Found     int // orders read as past their deadline
	Cancelled int // of those, the ones this round cancelled (the others moved or were held by someone else)
	Waiting   int // left waiting for the payment's outcome, their deadline moved by Recheck
}

// ExpireDeadlines is one round of the deadline sweep over up to limit
// orders. An error on one order does not stop the others; the errors are
// joined. SweepDeadlines runs it under the lease; tests call it directly.
func (a *App) ExpireDeadlines(ctx context.Context, limit int) (DeadlineRound, error) {
	return a.expireDeadlines(ctx, limit, nil)
}

// expireDeadlines is ExpireDeadlines under lease (nil: none), checked
// before each order: a lost lease stops the round with sqldb.ErrLeaseLost.
func (a *App) expireDeadlines(ctx context.Context, limit int, lease *sqldb.Lease) (DeadlineRound, error) {
	due, err := orderdb.PastDeadline(ctx, a.db, limit)
	if err != nil {
		return DeadlineRound{}, err
	}
	round := DeadlineRound{Found: len(due)}
	var errs []error
	for _, d := range due {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		outcome, err := a.expireDeadline(ctx, lease, d)
		if errors.Is(err, sqldb.ErrLeaseLost) {
			errs = append(errs, err)
			break
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("order %d: %w", d.ID, err))
			continue
		}
		switch outcome {
		case order.DeadlineCancel:
			round.Cancelled++
		case order.DeadlineWait:
			round.Waiting++
		}
	}
	if round.Cancelled > 0 {
		a.wake()
	}
	return round, errors.Join(errs...)
}

// expireDeadline acts on one order past its deadline: it cancels it if,
// under its row lock, it is still past its deadline (for awaiting_payment,
// once payment's answer allows it), or postpones the deadline to ask
// payment again. It reports what it did ("" for nothing: the order moved).
func (a *App) expireDeadline(ctx context.Context, lease *sqldb.Lease, d orderdb.Due) (order.DeadlineAction, error) {
	if err := failpoint.Inject(ctx, FailpointDeadlineBeforeCancel); err != nil {
		return "", err
	}
	// Before payment is asked: a sweep whose session ended may have a
	// successor by now, asking and cancelling instead.
	if lease != nil {
		if err := lease.Check(ctx); err != nil {
			return "", err
		}
	}
	log := a.log.With("order_id", d.ID, "job", "deadline-sweep")
	status := order.Status(d.Status)
	reason := order.DeadlineReason(status)
	if status == order.AwaitingPayment {
		dec := a.askPayment(ctx, log, d)
		if dec.Action == order.DeadlineWait {
			postponed, err := orderdb.PostponeDeadline(ctx, a.db, d.ID, status, a.cfg.Deadlines.Recheck)
			if err != nil || !postponed {
				return "", err // moved meanwhile: nothing to wait for
			}
			log.InfoContext(ctx, "payment deadline passed; not cancelled", "why", dec.Why,
				"asked_again_in", a.cfg.Deadlines.Recheck.String(), "waited", d.Waited().String())
			return order.DeadlineWait, nil
		}
		reason = dec.Reason
	}
	var (
		cancelled bool
		from      order.Status
	)
	// Idempotent: a second run finds the order no longer past its deadline.
	err := sqldb.WithTxRetry(ctx, a.db, a.txRetry(true), func(tx *sqlx.Tx) error {
		cancelled = false
		o, ok, err := orderdb.LockPastDeadline(ctx, tx, d.ID)
		if err != nil || !ok || o.Status != status {
			return err // moved meanwhile, or held by someone else: the next round sees it
		}
		from = o.Status
		cancelled, err = a.decide(ctx, Direct(tx), log, o, order.CancelRequested, reason, cause{actor: ActorDeadline})
		if err == nil && !cancelled {
			// A deadline on a state that cannot be cancelled is a bug in
			// the deadline table; say so loudly, do not loop on it.
			return fmt.Errorf("order %d in status %s has a deadline but cannot be cancelled", d.ID, o.Status)
		}
		return err
	})
	if err != nil || !cancelled {
		return "", err
	}
	a.metrics.deadlinesExpired.WithLabelValues(string(from)).Inc()
	log.WarnContext(ctx, "deadline passed; order cancelled", "status", from, "reason", reason)
	return order.DeadlineCancel, nil
}

// askPayment asks payment what became of the order's charge, outside any
// transaction, and decides from the answer (order.AtPaymentDeadline). An
// answer that cannot be had counts as an unknown outcome: waited for, not
// read as "not charged".
func (a *App) askPayment(ctx context.Context, log *slog.Logger, d orderdb.Due) order.DeadlineDecision {
	outcome := order.OutcomeNotAsked
	if a.cfg.Peers != nil {
		ans, answer, err := a.cfg.Peers.PaymentOutcome(ctx, d.ID)
		switch {
		case err != nil:
			log.WarnContext(ctx, "payment deadline: payment could not be asked", "err", err)
		case ans == nil:
			outcome = order.OutcomeNoPayment
		default:
			outcome = ans.Outcome
			log.InfoContext(ctx, "payment deadline: payment answered", "outcome", ans.Outcome, "source", ans.Source,
				"payment_status", ans.PaymentStatus, "detail", ans.Detail, "answered_at", answer.AnsweredAt)
		}
	}
	dec := order.AtPaymentDeadline(outcome, d.Waited() >= a.cfg.Deadlines.GiveUp())
	a.metrics.deadlineChecks.WithLabelValues(outcome, string(dec.Action)).Inc()
	return dec
}

// RunDeadlineSweep runs the sweep every interval until ctx ends (one
// SweepDeadlines a tick). A failed tick is logged, never returned: one bad
// row must not stop the service; the failing order is tried again next
// tick, not in a hot loop.
//
// Singleton across instances: a tick runs under the database lease
// DeadlineSweepLease and is skipped by the instances that do not get it.
// The sweep is correct concurrently (the cancel is compare-and-set under
// SKIP LOCKED), but every sweeper would ask payment, and through it the
// PSP, about the same awaiting_payment orders: the lease saves that.
func (a *App) RunDeadlineSweep(ctx context.Context, interval time.Duration, batch int) error {
	log := a.log.With("job", "deadline-sweep")
	retry.EveryFromNow(ctx, interval, func() {
		err := a.SweepDeadlines(ctx, batch)
		if err != nil && ctx.Err() == nil && !errors.Is(err, sqldb.ErrLeaseHeld) && !errors.Is(err, sqldb.ErrLeaseLost) {
			log.ErrorContext(ctx, "deadline sweep failed; retrying next tick", "err", err)
		}
	})
	return nil
}

// DeadlineSweepLease is the deadline sweep's database lease.
const DeadlineSweepLease = "deadline-sweep"

// SweepDeadlines is one tick of the sweep: it takes the lease (without
// waiting: sqldb.ErrLeaseHeld when another sweeper has it) and drains the
// backlog in rounds of batch, checking the lease before each order. A lost
// lease stops the tick (sqldb.ErrLeaseLost, logged and counted here).
func (a *App) SweepDeadlines(ctx context.Context, batch int) error {
	lease, err := sqldb.TryLease(ctx, a.db, DeadlineSweepLease, 0)
	if err != nil {
		return fmt.Errorf("deadline sweep: %w", err)
	}
	defer lease.Release()
	for ctx.Err() == nil {
		round, err := a.expireDeadlines(ctx, batch, lease)
		if errors.Is(err, sqldb.ErrLeaseLost) {
			a.leaseLost(ctx, a.log.With("job", "deadline-sweep"), DeadlineSweepLease, err)
		}
		if err != nil {
			return fmt.Errorf("deadline sweep round (found %d, cancelled %d): %w", round.Found, round.Cancelled, err)
		}
		// A full batch may have more behind it; but if nothing could be
		// cancelled (every row held by someone else), wait for the tick.
		if round.Found < batch || round.Cancelled == 0 {
			return nil
		}
	}
	return nil
}

// Upcoming lists open orders by deadline, earliest first.
func (a *App) Upcoming(ctx context.Context, limit int) ([]order.Order, error) {
	return orderdb.Upcoming(ctx, a.db, limit)
}
