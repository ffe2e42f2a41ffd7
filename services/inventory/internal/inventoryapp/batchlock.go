package inventoryapp

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorydb"
)

// lockReservation returns an order's reservation with its items, locked
// until the transaction ends (inventory.ErrNoReservation when there is
// none): two reads alone, two for all the reservations of a consumer batch
// (inbox.LockOnce; the order's events carry the order id as their
// aggregate id). A reservation a handler of the same batch inserts after
// that read is not in it and is read on its own.
func lockReservation(ctx context.Context, tx *sqlx.Tx, orderID uint64) (inventory.Reservation, error) {
	return inbox.LockOnce(ctx, batchReservationsKey{}, orderID,
		func(ids []uint64) (map[uint64]inventory.Reservation, error) {
			return inventorydb.LockReservations(ctx, tx, ids)
		},
		func(id uint64) (inventory.Reservation, error) { return inventorydb.LockReservation(ctx, tx, id) })
}

type batchReservationsKey struct{}
