package inventoryapp_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
)

// handleInBatches hands es to the consumer as a worker takes them, batch
// at a time (CONSUMER_BATCH), and wants every delivery acked.
func (f *fixture) handleInBatches(t *testing.T, batch int, es ...events.Envelope) {
	t.Helper()
	for len(es) > 0 {
		n := min(batch, len(es))
		ds := make([]rabbit.Delivery, n)
		for i, e := range es[:n] {
			ds[i] = delivery(e)
		}
		for i, d := range f.b.HandleBatch(context.Background(), ds) {
			if d != rabbit.Ack() {
				t.Fatalf("%s of order %d: decision %+v, want ack", es[i].Type, es[i].AggregateID, d)
			}
		}
		es = es[n:]
	}
}

// The saga's events for several orders at once, one of them a business
// rejection (two orders want the one SKU-LIMITED): at batch 16 the first
// batch's summed hold of SKU-LIMITED does not fit, the batch rolls back,
// and one at a time the first order reserves it and the second is
// rejected with its own result event. The second batch (a confirm, two
// cancels, a create) commits together. Every state, quantity and event is
// the same as one message at a time.
func TestSagaEventsInBatches(t *testing.T) {
	t.Parallel()
	inboxtest.EachBatch(t, func(t *testing.T, batch int) {
		f := setup(t)
		f.handleInBatches(t, batch,
			created(t, 10, item("SKU-1", 2), item("SKU-3", 1)),
			created(t, 11, item("SKU-LIMITED", 1), item("SKU-2", 1)),
			created(t, 12, item("SKU-LIMITED", 1)),
			created(t, 13, item("SKU-1", 1)),
		)
		f.wantStock(t, map[string][2]int64{"SKU-1": {0, 3}, "SKU-2": {0, 1}, "SKU-3": {0, 1}, "SKU-LIMITED": {0, 1}})
		f.handleInBatches(t, batch,
			confirmed(t, 10),
			cancelled(t, 11),
			cancelled(t, 13),
			created(t, 14, item("SKU-2", 3), item("SKU-4", 2)),
		)
		f.wantStock(t, map[string][2]int64{"SKU-1": {-2, 0}, "SKU-3": {-1, 0}, "SKU-2": {0, 3}, "SKU-4": {0, 2}})

		want := map[uint64]struct {
			status inventory.Status
			events []string
		}{
			10: {inventory.Committed, []string{events.InventoryReserved}},
			11: {inventory.Released, []string{events.InventoryReserved}},
			12: {inventory.Rejected, []string{events.InventoryRejected}},
			13: {inventory.Released, []string{events.InventoryReserved}},
			14: {inventory.Reserved, []string{events.InventoryReserved}},
		}
		for id, w := range want {
			f.wantStatus(t, id, w.status)
			var got []string
			for _, row := range f.outbox(t, id) {
				got = append(got, row.Type)
			}
			if fmt.Sprint(got) != fmt.Sprint(w.events) {
				t.Errorf("order %d: events %v, want %v", id, got, w.events)
			}
		}
		if n := f.count(t, `SELECT COUNT(*) FROM consumer_inbox WHERE consumer_name = 'inventory'`); n != 8 {
			t.Errorf("inbox rows = %d, want 8 (one per event)", n)
		}
		batches := inboxtest.Counter(t, f.reg, "consumer_batches_total", "inventory")
		fallbacks := inboxtest.Counter(t, f.reg, "consumer_batch_fallbacks_total", "inventory")
		if want := map[int][2]float64{1: {0, 0}, 16: {1, 1}}[batch]; [2]float64{batches, fallbacks} != want {
			t.Errorf("batches committed %v, rolled back %v; want %v", batches, fallbacks, want)
		}
	})
}
