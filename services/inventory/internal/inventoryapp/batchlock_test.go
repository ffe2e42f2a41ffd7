package inventoryapp_test

import (
	"testing"

	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorybindings"
)

// The reservations a batch decides on are read in one go, when its first
// confirm or cancel needs one. Here the same batch also creates a
// reservation after that read and cancels it: the cancel must find the
// new reservation (read on its own) and release it. Every reservation
// ends as one message at a time would leave it, with its items' stock,
// in one transaction.
func TestBatchReadsItsReservationsOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.handleInBatches(t, 16,
		created(t, 20, item("SKU-1", 2), item("SKU-3", 1)),
		created(t, 21, item("SKU-2", 1)),
	)
	f.handleInBatches(t, 16,
		confirmed(t, 20),
		created(t, 22, item("SKU-4", 2)),
		cancelled(t, 22),
		cancelled(t, 21),
	)
	for id, want := range map[uint64]inventory.Status{20: inventory.Committed, 21: inventory.Released, 22: inventory.Released} {
		f.wantStatus(t, id, want)
	}
	// Sold: two SKU-1 and one SKU-3 left on hand; nothing stays reserved.
	f.wantStock(t, map[string][2]int64{"SKU-1": {-2, 0}, "SKU-3": {-1, 0}})
	inboxtest.WantCounter(t, f.reg, "consumer_batches_total", inventorybindings.ConsumerName, 2)
	inboxtest.WantCounter(t, f.reg, "consumer_batch_fallbacks_total", inventorybindings.ConsumerName, 0)
}
