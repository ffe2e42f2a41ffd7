// Package inventoryapp holds the inventory service's use cases. Each is
// exactly one local transaction through sqldb.WithTx (the saga handlers run
// in the inbox's): the stock change, the reservation's state and the events
// it emits (outbox rows) commit together or not at all.
//
// Besides the saga handlers (saga.go) it runs two background jobs: the
// lease sweep, which expires reservations whose lease ran out (lease.go),
// and the gap check, which raises the alarm about events whose predecessor
// never arrived (gaps.go). Both are safe with any number of instances: every
// change they make is a compare-and-set.
package inventoryapp

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/sqldb"
	"github.com/relmsg/ordersaga/pkg/wrongway"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorydb"
)

// Defaults of Config.
const (
	DefaultLease       = 15 * time.Minute // RESERVATION_TTL
	DefaultGapDeadline = 5 * time.Minute  // GAP_DEADLINE
)

// Config is what the app needs beyond the database.
type Config struct {
	// Consumer is the name event gaps are recorded under: the inbox
	// consumer name of the saga handlers (inventorybindings.ConsumerName).
	Consumer string
	// Lease is how long a reservation holds its stock before the sweep may
	// release it (RESERVATION_TTL). Zero means DefaultLease.
	Lease time.Duration
	// GapDeadline is how long a gap may stay open before it is overdue
	// (GAP_DEADLINE). Zero means DefaultGapDeadline.
	GapDeadline time.Duration
	// Wake, if set, runs after a background job committed outbox events
	// (the outbox dispatcher's Wake). The saga handlers' commits are the
	// inbox consumer's to report (inbox.Config.AfterCommit).
	Wake func()
	// WrongWay holds the wrong-way switches (demo mode only; they can
	// change at run time). This service has a wrong way for
	// wrongway.IgnoreOrder, wired around its handlers by WrongWays. Nil:
	// every switch off.
	WrongWay *wrongway.Set
}

// App is the inventory service's application layer.
type App struct {
	db  *sqlx.DB
	log *slog.Logger
	cfg Config
}

// New returns the app. Its saga handlers are run by an inbox.Consumer (see
// inventorybindings.Handlers), whose AfterCommit wakes the outbox dispatcher.
func New(db *sqlx.DB, log *slog.Logger, cfg Config) *App {
	if cfg.Consumer == "" {
		panic("inventoryapp: Config.Consumer is required")
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.GapDeadline <= 0 {
		cfg.GapDeadline = DefaultGapDeadline
	}
	return &App{db: db, log: log, cfg: cfg}
}

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

// Receive books a goods receipt once per idempotency key: quantity more of
// sku on hand, in one conditional UPDATE, in the transaction that records
// the key, and returns the new stock. The same key with the same SKU and
// quantity again changes nothing and answers the stock as it is now
// (replayed); with another SKU or quantity it is inventory.ErrKeyReused.
// An unknown SKU is inventory.ErrUnknownSKU; a bad quantity, or one that
// would pass inventory.MaxOnHand, is inventory.ErrInvalid. None of these
// writes anything.
func (a *App) Receive(ctx context.Context, key, sku string, quantity int) (s inventory.Stock, replayed bool, err error) {
	if err := inventory.ValidateReceipt(quantity); err != nil {
		return inventory.Stock{}, false, err
	}
	if !inventory.ValidSKU(sku) {
		return inventory.Stock{}, false, inventory.ErrUnknownSKU
	}
	rec := inventorydb.Receipt{Key: key, SKU: sku, Quantity: quantity}
	// Idempotent by the key: after a COMMIT with an unknown outcome, the
	// second run either books the receipt or finds its key (a replay).
	err = sqldb.WithTxRetry(ctx, a.db, sqldb.TxRetry{Log: a.log, Idempotent: true}, func(tx *sqlx.Tx) error {
		if err := inventorydb.InsertReceipt(ctx, tx, rec); err != nil {
			return err
		}
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
	if sqldb.IsDuplicateKey(err) {
		return a.replayReceipt(ctx, rec)
	}
	if err != nil {
		return inventory.Stock{}, false, err
	}
	a.log.InfoContext(ctx, "goods received", "sku", sku, "quantity", quantity, "on_hand", s.OnHand)
	return s, false, nil
}

// replayReceipt answers a receipt whose key was booked before.
func (a *App) replayReceipt(ctx context.Context, rec inventorydb.Receipt) (inventory.Stock, bool, error) {
	first, err := inventorydb.ReceiptByKey(ctx, a.db, rec.Key)
	if err != nil {
		return inventory.Stock{}, false, err
	}
	if first.SKU != rec.SKU || first.Quantity != rec.Quantity {
		return inventory.Stock{}, false, inventory.ErrKeyReused
	}
	s, err := inventorydb.GetStock(ctx, a.db, rec.SKU)
	return s, true, err
}
