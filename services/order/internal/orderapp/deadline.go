package orderapp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/failpoint"
	"github.com/relmsg/ordersaga/pkg/sqldb"
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
//	SELECT id FROM orders WHERE deadline_at <= NOW(6)        -- candidates, no lock
//	  ORDER BY deadline_at LIMIT batch
//	per order, one transaction:
//	  SELECT ... WHERE id = ? AND deadline_at <= NOW(6)      -- re-check under the row lock;
//	    FOR UPDATE SKIP LOCKED                               -- a row someone else holds is skipped
//	  CancelRequested, reason from the state                 -- the customer cancel's decision:
//	  UPDATE orders ... WHERE id = ? AND status = ?          --   compare-and-set, deadline cleared
//	  INSERT order_history, outbox.Add (OrderCancelled)
//	COMMIT, wake the dispatcher
//
// OrderCancelled makes inventory release the reservation (or leave a marker
// if it never saw the order) and payment refund what it charged (or leave a
// marker so a late charge request charges nothing).
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
}

// ExpireDeadlines is one round of the deadline sweep over up to limit
// orders. An error on one order does not stop the others; the errors are
// joined. The loop calls it; tests call it directly.
func (a *App) ExpireDeadlines(ctx context.Context, limit int) (DeadlineRound, error) {
	ids, err := orderdb.PastDeadline(ctx, a.db, limit)
	if err != nil {
		return DeadlineRound{}, err
	}
	round := DeadlineRound{Found: len(ids)}
	var errs []error
	for _, id := range ids {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		cancelled, err := a.expireDeadline(ctx, id)
		if err != nil {
			errs = append(errs, fmt.Errorf("order %d: %w", id, err))
			continue
		}
		if cancelled {
			round.Cancelled++
		}
	}
	if round.Cancelled > 0 {
		a.wake()
	}
	return round, errors.Join(errs...)
}

// expireDeadline cancels one order if, under its row lock, it is still past
// its deadline, and reports whether it did.
func (a *App) expireDeadline(ctx context.Context, id uint64) (bool, error) {
	if err := failpoint.Inject(ctx, FailpointDeadlineBeforeCancel); err != nil {
		return false, err
	}
	log := a.log.With("order_id", id, "job", "deadline-sweep")
	var (
		cancelled bool
		from      order.Status
		reason    string
	)
	// Idempotent: a second run finds the order no longer past its deadline.
	err := sqldb.WithTxRetry(ctx, a.db, a.txRetry(true), func(tx *sqlx.Tx) error {
		cancelled = false
		o, ok, err := orderdb.LockPastDeadline(ctx, tx, id)
		if err != nil || !ok {
			return err // moved meanwhile, or held by someone else: the next round sees it
		}
		from, reason = o.Status, order.DeadlineReason(o.Status)
		cancelled, err = a.decide(ctx, tx, log, o, order.CancelRequested, reason, cause{actor: ActorDeadline})
		if err == nil && !cancelled {
			// A deadline on a state that cannot be cancelled is a bug in
			// the deadline table; say so loudly, do not loop on it.
			return fmt.Errorf("order %d in status %s has a deadline but cannot be cancelled", id, o.Status)
		}
		return err
	})
	if err != nil {
		return false, err
	}
	if cancelled {
		a.metrics.deadlinesExpired.WithLabelValues(string(from)).Inc()
		log.WarnContext(ctx, "deadline passed; order cancelled", "status", from, "reason", reason)
	}
	return cancelled, nil
}

// RunDeadlineSweep runs the sweep every interval until ctx ends. Each tick
// drains the backlog in rounds of batch; a round with an error ends the
// tick (the failing order is tried again next tick, not in a hot loop).
// Errors are logged, never returned: one bad row must not stop the service.
func (a *App) RunDeadlineSweep(ctx context.Context, interval time.Duration, batch int) error {
	log := a.log.With("job", "deadline-sweep")
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for ctx.Err() == nil {
			round, err := a.ExpireDeadlines(ctx, batch)
			if err != nil {
				if ctx.Err() == nil {
					log.ErrorContext(ctx, "deadline sweep round failed; retrying next tick", "err", err,
						"found", round.Found, "cancelled", round.Cancelled)
				}
				break
			}
			// A full batch may have more behind it; but if nothing could be
			// cancelled (every row held by someone else), wait for the tick.
			if round.Found < batch || round.Cancelled == 0 {
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Upcoming lists open orders by deadline, earliest first.
func (a *App) Upcoming(ctx context.Context, limit int) ([]order.Order, error) {
	return orderdb.Upcoming(ctx, a.db, limit)
}
