package paymentapp

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/inbox/batch"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentdb"
)

// Store is where a use case's locking read of its payment and its outbox
// writes go, inside its transaction. The use cases are written once
// against it: Direct reads and writes at once, the chapter's way; Batched,
// in a consumer batch (pkg/inbox/batch), reads the batch's payments in one
// statement and writes the batch's events in one INSERT at its end.
type Store interface {
	batch.Store
	// LockPayment reads an order's payment, locked until the transaction
	// ends (payment.ErrNotFound when there is none).
	LockPayment(ctx context.Context, orderID uint64) (payment.Payment, error)
}

// Direct is the store of one transaction, the chapter's way: its Emit
// writes to the outbox at once (batch.DirectStore).
func Direct(tx *sqlx.Tx) Store { return direct{batch.NewDirectStore(tx)} }

type direct struct{ batch.DirectStore }

func (d direct) LockPayment(ctx context.Context, orderID uint64) (payment.Payment, error) {
	return paymentdb.Lock(ctx, d.Tx(), orderID)
}

// Batched is the store of a consumer batch: its payments read once
// (batch.LockOnce; the saga's events and the charge and refund requests
// carry the order id as their aggregate id), its events written together
// (batch.BatchedStore).
func Batched(b *batch.Tx) Store { return batched{batch.BatchedStore{B: b}} }

type batched struct{ batch.BatchedStore }

type batchPaymentsKey struct{}

func (s batched) LockPayment(ctx context.Context, orderID uint64) (payment.Payment, error) {
	return batch.LockOnce(s.B, batchPaymentsKey{}, orderID,
		func(ids []uint64) (map[uint64]payment.Payment, error) { return paymentdb.LockAll(ctx, s.B.Tx, ids) },
		func(id uint64) (payment.Payment, error) { return paymentdb.Lock(ctx, s.B.Tx, id) })
}

// underLock is what a compare-and-set (moved, err) on a row this
// transaction holds locked (what: "payment", "refund") comes to: it cannot
// miss while the lock is held, so a miss is a fault to retry, not an
// outcome.
func underLock(what string, orderID uint64, moved bool, err error) error {
	if err != nil {
		return err
	}
	if !moved {
		return fmt.Errorf("%s %d changed under its row lock", what, orderID)
	}
	return nil
}
