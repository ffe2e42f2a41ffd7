// Package inventoryapp holds the inventory service's use cases. Each is
// exactly one local transaction through sqldb.WithTx (the saga handlers run
// in the inbox's): the stock change, the reservation's state and the events
// it emits (outbox rows) commit together or not at all.
package inventoryapp

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/sqldb"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorydb"
)

// App is the inventory service's application layer.
type App struct {
	db  *sqlx.DB
	log *slog.Logger

	// ignoreOrder is set only by the wrong-way switch ignore-order.
	ignoreOrder bool
}

// New returns the app. Its saga handlers are run by an inbox.Consumer (see
// inventoryamqp.Handlers), whose AfterCommit wakes the outbox dispatcher.
func New(db *sqlx.DB, log *slog.Logger) *App {
	return &App{db: db, log: log}
}

// IgnoreOrder turns on the wrong way of wrongway.IgnoreOrder: OnOrderCreated
// disregards the marker a cancel left for an order it had not seen, so a
// create that arrives after its cancel reserves stock for a cancelled order,
// and no later event will ever release it (a "hanging" reservation). For
// the out-of-order experiment only.
func (a *App) IgnoreOrder() { a.ignoreOrder = true }

// Stock returns every SKU's stock, sorted by SKU.
func (a *App) Stock(ctx context.Context) ([]inventory.Stock, error) {
	return inventorydb.ListStock(ctx, a.db)
}

// StockOf returns one SKU's stock, or inventory.ErrUnknownSKU.
func (a *App) StockOf(ctx context.Context, sku string) (inventory.Stock, error) {
	if !inventory.ValidSKU(sku) {
		return inventory.Stock{}, inventory.ErrUnknownSKU
	}
	return inventorydb.GetStock(ctx, a.db, sku)
}

// Reservation returns an order's reservation, or inventory.ErrNoReservation.
func (a *App) Reservation(ctx context.Context, orderID uint64) (inventory.Reservation, error) {
	return inventorydb.GetReservation(ctx, a.db, orderID)
}

// Receive books a goods receipt: quantity more of sku on hand, in one
// conditional UPDATE, and returns the new stock. An unknown SKU is
// inventory.ErrUnknownSKU; a bad quantity, or one that would pass
// inventory.MaxOnHand, is inventory.ErrInvalid. Neither writes anything.
func (a *App) Receive(ctx context.Context, sku string, quantity int) (inventory.Stock, error) {
	if err := inventory.ValidateReceipt(quantity); err != nil {
		return inventory.Stock{}, err
	}
	if !inventory.ValidSKU(sku) {
		return inventory.Stock{}, inventory.ErrUnknownSKU
	}
	var s inventory.Stock
	err := sqldb.WithTx(ctx, a.db, func(tx *sqlx.Tx) error {
		ok, err := inventorydb.Receive(ctx, tx, sku, quantity)
		if err != nil {
			return err
		}
		s, err = inventorydb.GetStock(ctx, tx, sku)
		if err != nil {
			return err // inventory.ErrUnknownSKU when the UPDATE found no row
		}
		if !ok {
			return fmt.Errorf("%w: on_hand of %s would pass %d", inventory.ErrInvalid, sku, inventory.MaxOnHand)
		}
		return nil
	})
	if err != nil {
		return inventory.Stock{}, err
	}
	a.log.InfoContext(ctx, "goods received", "sku", sku, "quantity", quantity, "on_hand", s.OnHand)
	return s, nil
}
