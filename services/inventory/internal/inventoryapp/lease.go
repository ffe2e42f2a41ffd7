package inventoryapp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorydb"
)

// The lease sweep. A reservation holds its stock until expires_at (set in
// database time when it was reserved, NOW(6) + Config.Lease). The sweep
// reads a bounded batch of reservations still reserved past that moment
// and expires each in its own transaction:
//
//	UPDATE reservations SET status = 'expired', ... WHERE order_id = ?
//	  AND status = 'reserved' AND expires_at < NOW(6)    -- compare-and-set
//	release each held item, in SKU order                  -- reserved -= q
//	InventoryReservationExpired, next aggregate_version   -- outbox row
//	COMMIT
//
// The read that proposes candidates takes no lock; the compare-and-set
// decides. Any number of sweepers (instances) may propose the same row: the
// first UPDATE locks it, the others wait for that commit and then find the
// status changed and touch nothing, so stock is released once. A confirm or
// cancel racing with the sweep serialises on the same row lock: whichever
// commits first wins, and the other sees its result (a confirm that comes
// second takes the stock again or fails, see confirmExpired).

// The windows of the sweep, as named points.
const (
	// FailpointBeforeExpire: a sweeper has read its candidates and not yet
	// run its compare-and-set on one of them.
	FailpointBeforeExpire = "inventory.expire.before-cas"
	// FailpointExpireBeforeCommit: a sweeper expired a reservation,
	// released its stock and wrote its event, and has not committed.
	FailpointExpireBeforeCommit = "inventory.expire.before-commit"
)

func init() {
	failpoint.Register(FailpointBeforeExpire, "the lease sweep read a reservation whose lease ran out and has not expired it yet: "+
		"if another sweeper, a confirm or a cancel moves it now, this sweeper's compare-and-set must change nothing")
	failpoint.Register(FailpointExpireBeforeCommit, "the lease sweep expired a reservation, released its stock and wrote "+
		"InventoryReservationExpired, not committed: a failure here must leave it reserved, held and unannounced, for the next round")
}

// expiredReason is stored on an expired reservation and sent in
// InventoryReservationExpired.
const expiredReason = "lease ran out before the order was confirmed; stock released"

// SweepRound is what one round of the lease sweep did.
type SweepRound struct {
	Found   int // reservations read as past their lease
	Expired int // of those, the ones this round expired (the others moved meanwhile)
}

// ExpireLeases is one round of the lease sweep: up to limit reservations
// past their lease, each expired in its own transaction (see above). An
// error on one reservation does not stop the others; the errors are joined.
// The loop calls it; tests call it directly.
func (a *App) ExpireLeases(ctx context.Context, limit int) (SweepRound, error) {
	ids, err := inventorydb.LeaseExpired(ctx, a.db, limit)
	if err != nil {
		return SweepRound{}, err
	}
	round := SweepRound{Found: len(ids)}
	var errs []error
	for _, id := range ids {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		expired, err := a.expire(ctx, id)
		if err != nil {
			errs = append(errs, fmt.Errorf("expire reservation %d: %w", id, err))
			continue
		}
		if expired {
			round.Expired++
		}
	}
	if round.Expired > 0 && a.cfg.Wake != nil {
		a.cfg.Wake()
	}
	return round, errors.Join(errs...)
}

// expire expires one reservation if it is still reserved past its lease,
// and reports whether it did.
func (a *App) expire(ctx context.Context, orderID uint64) (bool, error) {
	log := a.log.With("order_id", orderID, "job", "lease-sweep")
	if err := failpoint.Inject(ctx, FailpointBeforeExpire); err != nil {
		return false, err
	}
	to, ok := inventory.Next(inventory.Reserved, inventory.Expire)
	if !ok {
		return false, errors.New("transition table: a reservation does not expire")
	}
	var (
		expired bool
		eventID string
	)
	// A broken connection or a deadlock before COMMIT runs the transaction
	// again; so does a COMMIT with an unknown outcome, because the expiry
	// is a compare-and-set that a second run finds done.
	err := sqldb.WithTxRetry(ctx, a.db, sqldb.TxRetry{Idempotent: true, Log: log}, func(tx *sqlx.Tx) error {
		expired = false
		moved, err := inventorydb.Expire(ctx, tx, orderID, to, expiredReason)
		if err != nil || !moved {
			return err // moved meanwhile: a confirm, a cancel or another sweeper was first
		}
		// The row is ours (locked by the UPDATE): read its new version and
		// what it holds.
		r, err := inventorydb.LockReservation(ctx, tx, orderID)
		if err != nil {
			return err
		}
		if err := Direct(tx).Move(ctx, inventory.Effect(inventory.Reserved, to), r.Items); err != nil {
			return fmt.Errorf("reservation %d expired: %w", orderID, err)
		}
		ids, err := outbox.Add(ctx, tx, outbox.Event{AggregateID: orderID, AggregateVersion: r.Version,
			Type:    events.InventoryReservationExpired,
			Payload: events.InventoryReservationExpiredV1{OrderID: orderID, Reason: expiredReason}})
		if err != nil {
			return err
		}
		expired, eventID = true, ids[0]
		return failpoint.Inject(ctx, FailpointExpireBeforeCommit)
	})
	if err != nil {
		return false, err
	}
	if expired {
		log.WarnContext(ctx, "reservation lease expired; stock released", "event_id", eventID,
			"event_type", events.InventoryReservationExpired)
	}
	return expired, nil
}

// RunLeaseSweep runs the lease sweep every interval until ctx ends. Each
// tick drains the backlog in rounds of batch; a round with an error ends
// the tick (the failing reservation is tried again next tick, not in a hot
// loop). Errors are logged, never returned: one bad row must not stop the
// service.
func (a *App) RunLeaseSweep(ctx context.Context, interval time.Duration, batch int) error {
	log := a.log.With("job", "lease-sweep")
	retry.EveryFromNow(ctx, interval, func() {
		for ctx.Err() == nil {
			round, err := a.ExpireLeases(ctx, batch)
			if err != nil {
				if ctx.Err() == nil {
					log.ErrorContext(ctx, "lease sweep round failed; retrying next tick", "err", err,
						"found", round.Found, "expired", round.Expired)
				}
				return
			}
			if round.Found < batch {
				return
			}
		}
	})
	return nil
}
