package orderapp

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/inbox/batch"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
)

// Store is where a use case's locking read of its order and its writes go,
// inside its transaction. The use cases are written once against it: Direct
// makes every read and write at once, the chapter's way; Batched, in a
// consumer batch (pkg/inbox/batch), reads the batch's orders in one
// statement and writes the batch's history rows and events in one INSERT
// each, at the end. Either way the same rows end up written.
type Store interface {
	// batch.Store's Emit writes result events to the outbox, after the
	// history rows.
	batch.Store
	// LockOrder reads order id, locked until the transaction ends
	// (order.ErrNotFound when there is none).
	LockOrder(ctx context.Context, id uint64) (order.Order, error)
	// RecordChange writes the order_history row of a change, before the
	// event the change emits.
	RecordChange(ctx context.Context, c orderdb.Change) error
}

// Direct is the store of one transaction, the chapter's way: its Emit
// writes to the outbox at once (batch.DirectStore).
func Direct(tx *sqlx.Tx) Store { return direct{batch.NewDirectStore(tx)} }

type direct struct{ batch.DirectStore }

func (d direct) LockOrder(ctx context.Context, id uint64) (order.Order, error) {
	return orderdb.Lock(ctx, d.Tx(), id)
}

func (d direct) RecordChange(ctx context.Context, c orderdb.Change) error {
	return orderdb.InsertChange(ctx, d.Tx(), c)
}

// Batched is the store of a consumer batch: the batch's orders read once
// (batch.LockOnce; the saga's events carry the order id as their aggregate
// id), its history rows in one INSERT before the batch's outbox INSERT, so
// the history still comes before the events it emitted, the order of the
// timeline. Its events are written together (batch.BatchedStore).
func Batched(b *batch.Tx) Store {
	s := &batched{BatchedStore: batch.BatchedStore{B: b}}
	b.BeforeCommit(func(ctx context.Context) error { return orderdb.InsertChanges(ctx, b.Tx, s.changes) })
	return s
}

type batched struct {
	batch.BatchedStore
	changes []orderdb.Change // in the order the handlers made them
}

type batchOrdersKey struct{}

func (s *batched) LockOrder(ctx context.Context, id uint64) (order.Order, error) {
	return batch.LockOnce(s.B, batchOrdersKey{}, id,
		func(ids []uint64) (map[uint64]order.Order, error) { return orderdb.LockAll(ctx, s.B.Tx, ids) },
		func(id uint64) (order.Order, error) { return orderdb.Lock(ctx, s.B.Tx, id) })
}

func (s *batched) RecordChange(_ context.Context, c orderdb.Change) error {
	s.changes = append(s.changes, c)
	return nil
}
