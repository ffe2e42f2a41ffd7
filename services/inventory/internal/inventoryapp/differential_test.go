package inventoryapp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"pgregory.net/rapid"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/inbox/batch"
	"github.com/relmsg/ordersaga/pkg/inbox/batch/batchtest"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventoryapp"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorybindings"
)

// The differential test of the inventory consumer (pkg/inbox/batch): the
// same generated deliveries, one at a time and in batches, on two
// databases, end with the same reservations, stock, gaps, inbox rows,
// result events, dead letters and decisions.

// inventorySystem is one run: the consumer as the service wires it, on a
// database of its own, with a lease that has always run out when the
// sweep (the action "sweep") looks.
type inventorySystem struct {
	db  *sqldbtest.DB
	app *inventoryapp.App
	c   *inbox.Consumer
	b   *batch.Consumer[inventoryapp.Store]
	reg *prometheus.Registry
}

func newInventorySystem(t *testing.T) *inventorySystem {
	db := sqldbtest.New(t, "inventory")
	app := inventoryapp.New(db.DB, quiet, inventoryapp.Config{Consumer: inventorybindings.ConsumerName, Lease: time.Microsecond})
	reg := prometheus.NewRegistry()
	c, b := batch.New(inbox.Config{Name: inventorybindings.ConsumerName, DB: db.DB, Log: quiet, Metrics: inbox.NewMetrics(reg)},
		inventorybindings.Handlers(app), batch.Options{Metrics: batch.NewMetrics(reg)})
	return &inventorySystem{db: db, app: app, c: c, b: b, reg: reg}
}

// differentialStock is each SKU's on_hand at the start of a check: little,
// so that reservations compete.
var differentialStock = map[string]int{"SKU-1": 2, "SKU-2": 2, "SKU-LIMITED": 1}

func (s *inventorySystem) reset(ctx context.Context) error {
	for _, q := range []string{"DELETE FROM reservation_items", "DELETE FROM reservations", "DELETE FROM event_gaps",
		"DELETE FROM consumer_inbox", "DELETE FROM outbox_events", "DELETE FROM dead_letters", "UPDATE stock SET reserved = 0"} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	for sku, n := range differentialStock {
		if _, err := s.db.ExecContext(ctx, "UPDATE stock SET on_hand = ? WHERE sku = ?", n, sku); err != nil {
			return err
		}
	}
	return nil
}

func (s *inventorySystem) system() batchtest.System {
	return batchtest.System{One: s.c.Handle, Many: s.b.HandleBatch,
		Act: func(ctx context.Context, name string) error {
			_, err := s.app.ExpireLeases(ctx, 100) // "sweep": every reservation held so far expires
			return err
		},
		Prepare: s.reset,
		// Every table the consumer writes, without times and generated ids.
		Rows: func(ctx context.Context) (map[string][]string, error) {
			return batchtest.RowsWithMechanisms(ctx, s.db.DB, map[string]string{
				"reservations": `SELECT order_id, status, reason, aggregate_version FROM reservations ORDER BY order_id`,
				"items":        `SELECT order_id, sku, quantity FROM reservation_items ORDER BY order_id, sku`,
				"stock":        `SELECT sku, on_hand, reserved FROM stock ORDER BY sku`,
				"gaps": `SELECT aggregate_id, event_id, event_type, received_version, expected_version, resolved_at IS NULL, resolution
FROM event_gaps ORDER BY aggregate_id, expected_version`,
			})
		}}
}

func TestInventoryBatchesDecideAsOneAtATime(t *testing.T) {
	t.Parallel()
	one, many := newInventorySystem(t), newInventorySystem(t)
	rapid.Check(t, func(rt *rapid.T) {
		batchtest.Same(rt, one.system(), many.system(), inventorySteps(rt), batchtest.Sizes(rt))
	})
	batchtest.WantBatches(t, many.reg, inventorybindings.ConsumerName)
}

// inventorySteps draws the saga's events for two or three orders: a
// create (sometimes a second one under another id), a confirm, a cancel
// (before or after the confirm), some confirms only after the lease sweep
// has expired the order's reservation (a late payment); they arrive mostly
// in each order's own sequence, interleaved, sometimes in any order.
func inventorySteps(t *rapid.T) []batchtest.Step {
	skus := rapid.SampledFrom([]string{"SKU-LIMITED", "SKU-1", "SKU-LIMITED", "SKU-2", "SKU-SOLDOUT"})
	var perOrder [][]batchtest.Item
	for o := uint64(1); o <= uint64(rapid.IntRange(2, 3).Draw(t, "orders")); o++ {
		var items []events.Item
		for _, sku := range rapid.SliceOfNDistinct(skus, 1, 2, func(s string) string { return s }).Draw(t, "skus") {
			items = append(items, events.Item{SKU: sku, Quantity: rapid.IntRange(1, 2).Draw(t, "quantity"), UnitPriceCents: 250})
		}
		is := batchtest.Events(differentialEvent(t, events.OrderCreated, o, 1, createdPayload(o, items...)))
		if rapid.IntRange(0, 5).Draw(t, "second create") == 0 {
			is = append(is, batchtest.Events(differentialEvent(t, events.OrderCreated, o, 1, createdPayload(o, items...)))...)
		}
		confirm := rapid.Bool().Draw(t, "confirm")
		if confirm {
			if rapid.Bool().Draw(t, "lease runs out first") {
				is = append(is, batchtest.Item{Action: "sweep"})
			}
			is = append(is, batchtest.Events(differentialEvent(t, events.OrderConfirmed, o, 2, events.OrderConfirmedV1{OrderID: o}))...)
		}
		if rapid.Bool().Draw(t, "cancel") {
			after := confirm && rapid.Bool().Draw(t, "after confirm")
			is = append(is, batchtest.Events(differentialEvent(t, events.OrderCancelled, o, 3,
				events.OrderCancelledV1{OrderID: o, Reason: "user cancel", AfterConfirm: after}))...)
		}
		perOrder = append(perOrder, is)
	}
	return batchtest.Steps(t, inventorybindings.Queue, batchtest.Arrival(t, perOrder))
}

func differentialEvent(t *rapid.T, typ events.Type, orderID, version uint64, payload any) events.Envelope {
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return events.Envelope{EventID: uuid.NewString(), Type: typ, AggregateID: orderID, AggregateVersion: version,
		SchemaVersion: 1, CorrelationID: fmt.Sprint(orderID), Payload: b}
}

// Shrunk counterexamples, each a test of its own.

// A cancel and a late confirm in one take: the confirm's stock must be
// taken after the cancel's release, as one at a time, so the late confirm
// finds the stock the cancel gave back and commits.
func TestBatchLateConfirmSeesTheReleaseBeforeIt(t *testing.T) {
	t.Parallel()
	one, many := newInventorySystem(t), newInventorySystem(t)
	limited := events.Item{SKU: "SKU-LIMITED", Quantity: 1, UnitPriceCents: 250}
	b := created(t, 2, limited)
	a := created(t, 1, limited)
	cancelA := cancelled(t, 1)
	cancelA.AggregateVersion = 3
	steps := []batchtest.Step{
		{Take: deliveriesFor(b)}, {Action: "sweep"}, // B's lease runs out: its SKU-LIMITED is free again
		{Take: deliveriesFor(a)},                        // A holds it
		{Take: deliveriesFor(cancelA, confirmed(t, 2))}, // A gives it back, then B's late confirm takes it
	}
	batchtest.Same(t, one.system(), many.system(), steps, 16)
	var status string
	if err := many.db.Get(&status, "SELECT status FROM reservations WHERE order_id = 2"); err != nil || status != "committed" {
		t.Fatalf("late confirm after the cancel in one batch: reservation %q (%v), want committed", status, err)
	}
}

func deliveriesFor(es ...events.Envelope) []rabbit.Delivery {
	ds := make([]rabbit.Delivery, len(es))
	for i, e := range es {
		ds[i] = delivery(e)
	}
	return ds
}
