package orderapp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/sqldb"
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
// transaction: the compare-and-set on the order's status, the
// OrderCancelled event and the request's idempotency key. The deadline
// sweep cancels through the same decision (CancelRequested), with the
// deadline's reason.
//
// The key makes a retried request safe to answer: the same key with the
// same request (order and reason) returns the result the first request
// recorded (replayed=true) and writes nothing; the same key with another
// request is order.ErrIdempotencyConflict. Cancelling is idempotent by the
// order's state as well (a second key finds it already cancelled), but only
// the key gives a retry the first answer back.
func (a *App) Cancel(ctx context.Context, key string, id uint64, reason string) (o order.Order, result CancelResult, replayed bool, err error) {
	hash := cancelHash(id, reason)
	// Idempotent by the key: a second run after a COMMIT with an unknown
	// outcome finds the key and answers the first result.
	err = sqldb.WithTxRetry(ctx, a.db, a.txRetry(true), func(tx *sqlx.Tx) error {
		result, replayed = "", false
		// A retry, the common case of a used key, needs no order lock.
		prior, found, err := orderdb.GetCancelRequest(ctx, tx, key)
		if err != nil {
			return err
		}
		if found {
			result, replayed, err = replayCancel(prior, id, hash)
			return err
		}
		o, err := orderdb.Lock(ctx, tx, id)
		if err != nil {
			return err
		}
		switch o.Status {
		case order.Cancelled:
			result = AlreadyCancelled
		case order.Rejected:
			result = AlreadyRejected
		default:
			changed, err := a.decide(ctx, Direct(tx), a.log.With("order_id", id), o, order.CancelRequested, reason, cause{actor: ActorAPI})
			if err != nil {
				return err
			}
			if !changed {
				return fmt.Errorf("order %d in status %s cannot be cancelled", id, o.Status)
			}
			result = Cancelled
		}
		return orderdb.InsertCancelRequest(ctx, tx, key, orderdb.CancelRequest{OrderID: id, RequestHash: hash, Result: string(result)})
	})
	if errors.Is(err, orderdb.ErrDuplicateKey) {
		// A concurrent request with the same key committed first: its
		// transaction rolled ours back, cancel included.
		prior, _, gerr := orderdb.GetCancelRequest(ctx, a.db, key)
		if gerr != nil {
			return order.Order{}, "", false, gerr
		}
		result, replayed, err = replayCancel(prior, id, hash)
	}
	if err != nil {
		return order.Order{}, "", false, err
	}
	if result == Cancelled && !replayed {
		a.wake()
	}
	o, err = a.Get(ctx, id)
	return o, result, replayed, err
}

// replayCancel answers a cancel whose key was used before: the recorded
// result if the request is the same, a conflict otherwise.
func replayCancel(prior orderdb.CancelRequest, id uint64, hash string) (CancelResult, bool, error) {
	if prior.OrderID != id || prior.RequestHash != hash {
		return "", false, order.ErrIdempotencyConflict
	}
	return CancelResult(prior.Result), true, nil
}

// cancelHash identifies a cancel request: the order and the reason.
func cancelHash(id uint64, reason string) string {
	sum := sha256.Sum256([]byte(strconv.FormatUint(id, 10) + "\x00" + reason))
	return hex.EncodeToString(sum[:])
}
