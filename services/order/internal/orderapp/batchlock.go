package orderapp

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
)

// lockOrder returns order id, locked until the transaction ends, for a
// consumed result event to decide on.
//
// Alone, that is one locking read (orderdb.Lock). In a consumer batch
// (pkg/inbox, HandleBatch) the first handler locks the orders of every
// event of the batch in one read, in id order, and each handler then takes
// its order from that read, once: a second event of the batch for the same
// order reads it again, after the first one's change. Taking the locks in
// id order also means two batches never lock the same orders in opposite
// orders. The saga's events carry the order id as their aggregate id; an
// event whose order is not in the read (another id in its payload, an
// unknown order) reads on its own, as alone.
func lockOrder(ctx context.Context, tx *sqlx.Tx, id uint64) (order.Order, error) {
	f, ok := inbox.Shared(ctx, batchOrdersKey{}, func() inbox.Finisher { return &batchOrders{} })
	if !ok {
		return orderdb.Lock(ctx, tx, id)
	}
	b := f.(*batchOrders)
	if b.locked == nil {
		es, _ := inbox.Events(ctx)
		ids := make([]uint64, 0, len(es))
		for _, e := range es {
			ids = append(ids, e.AggregateID)
		}
		locked, err := orderdb.LockAll(ctx, tx, ids)
		if err != nil {
			return order.Order{}, err
		}
		b.locked = locked
	}
	o, ok := b.locked[id]
	if !ok {
		return orderdb.Lock(ctx, tx, id)
	}
	delete(b.locked, id) // taken: a later change makes this copy stale
	return o, nil
}

type batchOrdersKey struct{}

// batchOrders holds a batch's orders from their one locking read until
// each is taken.
type batchOrders struct{ locked map[uint64]order.Order }

// Finish: the locks end with the batch's transaction; nothing to write.
func (*batchOrders) Finish(context.Context, *sqlx.Tx) error { return nil }
