package orderapp

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
)

// lockOrder returns order id, locked until the transaction ends, for a
// consumed result event to decide on: one locking read alone, one for all
// the orders of a consumer batch (inbox.LockOnce; the saga's events carry
// the order id as their aggregate id).
func lockOrder(ctx context.Context, tx *sqlx.Tx, id uint64) (order.Order, error) {
	return inbox.LockOnce(ctx, batchOrdersKey{}, id,
		func(ids []uint64) (map[uint64]order.Order, error) { return orderdb.LockAll(ctx, tx, ids) },
		func(id uint64) (order.Order, error) { return orderdb.Lock(ctx, tx, id) })
}

type batchOrdersKey struct{}
