package inventoryapp

import (
	"context"
	"fmt"
	"sort"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorydb"
)

// stockBatch collects the stock changes of the events of one consumer
// batch (pkg/inbox, HandleBatch) and makes them right before the batch's
// COMMIT: one conditional UPDATE per SKU, in SKU order. With a few busy
// SKUs, a batch of reservations would otherwise lock a SKU row in its first
// event and hold it through all the others, and two batches locking SKUs
// in the orders of their events would deadlock.
//
// If the summed change of a SKU cannot apply (a shortage), the batch rolls
// back and its events run one at a time, where each reservation's own hold
// decides, and a rejection is written as usual.
type stockBatch map[string]inventorydb.StockChange

type stockBatchKey struct{}

// batchOf returns the stock changes of the batch ctx belongs to; ok is
// false when the event runs alone and changes stock itself.
func batchOf(ctx context.Context) (stockBatch, bool) {
	f, ok := inbox.Shared(ctx, stockBatchKey{}, func() inbox.Finisher { return stockBatch{} })
	if !ok {
		return nil, false
	}
	return f.(stockBatch), true
}

// add records the stock effect on each line.
func (b stockBatch) add(effect inventory.StockEffect, lines []inventory.Line) error {
	for _, l := range lines {
		c := b[l.SKU]
		switch effect {
		case inventory.EffectHold:
			c.ReservedIn += l.Quantity
		case inventory.EffectCommit:
			c.OnHandOut += l.Quantity
			c.ReservedOut += l.Quantity
		case inventory.EffectRelease:
			c.ReservedOut += l.Quantity
		case inventory.EffectRestock:
			c.OnHandIn += l.Quantity
		default:
			return fmt.Errorf("stock effect %q is not batched", effect)
		}
		b[l.SKU] = c
	}
	return nil
}

// Finish makes the changes, in SKU order (the service's lock order).
func (b stockBatch) Finish(ctx context.Context, tx *sqlx.Tx) error {
	skus := make([]string, 0, len(b))
	for sku := range b {
		skus = append(skus, sku)
	}
	sort.Strings(skus)
	for _, sku := range skus {
		ok, err := inventorydb.Change(ctx, tx, sku, b[sku])
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("the batch's stock changes of %s do not fit its row: %+v", sku, b[sku])
		}
	}
	return nil
}
