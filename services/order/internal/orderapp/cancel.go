package orderapp

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/sqldb"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
)

// CancelResult says what a cancel request did.
type CancelResult string

const (
	// Cancelled: the order was cancelled now; OrderCancelled tells
	// inventory to release (or restock) and payment to refund what it
	// charged.
	Cancelled CancelResult = "cancelled"
	// AlreadyCancelled and AlreadyRejected: nothing to do; asking again is
	// not an error (the cancel is idempotent by the order's state).
	AlreadyCancelled CancelResult = "already_cancelled"
	AlreadyRejected  CancelResult = "already_rejected"
)

// Cancel cancels an order in any non-terminal state, and a confirmed one as
// a new business transaction (refund and restock, not an undo). One
// transaction: the compare-and-set on the order's status and the
// OrderCancelled event. The deadline sweep cancels through the same
// decision (CancelRequested), with the deadline's reason.
func (a *App) Cancel(ctx context.Context, id uint64, reason string) (order.Order, CancelResult, error) {
	var result CancelResult
	err := sqldb.WithTx(ctx, a.db, func(tx *sqlx.Tx) error {
		o, err := orderdb.Lock(ctx, tx, id)
		if err != nil {
			return err
		}
		switch o.Status {
		case order.Cancelled:
			result = AlreadyCancelled
			return nil
		case order.Rejected:
			result = AlreadyRejected
			return nil
		}
		log := a.log.With("order_id", id)
		changed, err := a.decide(ctx, tx, log, o, order.CancelRequested, reason, cause{actor: ActorAPI})
		if err != nil {
			return err
		}
		if !changed {
			return fmt.Errorf("order %d in status %s cannot be cancelled", id, o.Status)
		}
		result = Cancelled
		return nil
	})
	if err != nil {
		return order.Order{}, "", err
	}
	if result == Cancelled {
		a.wake()
	}
	o, err := orderdb.Get(ctx, a.db, id)
	return o, result, err
}
