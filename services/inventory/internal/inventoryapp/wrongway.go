package inventoryapp

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/wrongway"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorydb"
)

// The wrong way of this package, for the lab's out-of-order experiment
// (pkg/wrongway; demo mode only). The saga handlers reach it by one switch
// each: OnOrderCreated forgets the cancel's marker, OnOrderCancelled keeps
// no gap books.

// ignoringOrder reports whether the wrong way of wrongway.IgnoreOrder is on:
// OnOrderCreated then disregards the marker a cancel left for an order it
// had not seen, so a create that arrives after its cancel reserves stock for
// a cancelled order, and no later event will ever release it (a "hanging"
// reservation). The cancel records no gap either: the wrong way does not
// look at order at all. Each handler reads it once, so one event sees one
// setting.
func (a *App) ignoringOrder() bool { return a.cfg.WrongWay.On(wrongway.IgnoreOrder) }

// forgetCancel is the wrong way of OnOrderCreated: it deletes the marker a
// cancel left for this order, so the create that follows finds the order id
// free and reserves, as if the cancel had never come.
func forgetCancel(ctx context.Context, tx *sqlx.Tx, orderID uint64) error {
	return inventorydb.DeleteMarker(ctx, tx, orderID)
}
