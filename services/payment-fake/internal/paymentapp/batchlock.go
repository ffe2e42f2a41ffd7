package paymentapp

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentdb"
)

// lockPayment returns an order's payment, locked until the transaction
// ends, for a PSP outcome to be recorded on: one locking read alone, one
// for all the payments of a consumer batch (inbox.LockOnce; the charge and
// refund requests carry the order id as their aggregate id).
func lockPayment(ctx context.Context, tx *sqlx.Tx, orderID uint64) (payment.Payment, error) {
	return inbox.LockOnce(ctx, batchPaymentsKey{}, orderID,
		func(ids []uint64) (map[uint64]payment.Payment, error) { return paymentdb.LockAll(ctx, tx, ids) },
		func(id uint64) (payment.Payment, error) { return paymentdb.Lock(ctx, tx, id) })
}

type batchPaymentsKey struct{}
