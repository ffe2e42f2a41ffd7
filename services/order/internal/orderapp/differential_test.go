package orderapp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"pgregory.net/rapid"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/inbox/batch/batchtest"
	"github.com/relmsg/ordersaga/services/order/internal/orderapp"
	"github.com/relmsg/ordersaga/services/order/internal/orderbindings"
)

// The differential test of the order consumer (pkg/inbox/batch): the same
// generated results of inventory and payment, one at a time and in
// batches, on two databases, end with the same orders, history, inbox
// rows, result events, dead letters and decisions. Cancels over the API
// happen between takes, the same in both.

type orderSystem struct {
	db  *sqldbtest.DB
	app *orderapp.App
	c   consumer
	reg *prometheus.Registry
}

func newOrderSystem(t *testing.T) *orderSystem {
	db := sqldbtest.New(t, "order")
	app := orderapp.New(db.DB, func() {}, quiet, orderapp.Config{})
	reg := prometheus.NewRegistry()
	return &orderSystem{db: db, app: app, c: newConsumer(db.DB, app, reg), reg: reg}
}

// reset empties the order tables and creates orders 1..n as the API does.
func (s *orderSystem) reset(ctx context.Context, n int) error {
	for _, q := range []string{"DELETE FROM order_history", "DELETE FROM order_items", "DELETE FROM cancel_requests",
		"DELETE FROM orders", "ALTER TABLE orders AUTO_INCREMENT = 1", "DELETE FROM consumer_inbox",
		"DELETE FROM outbox_events", "DELETE FROM dead_letters"} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	for i := 1; i <= n; i++ {
		if _, _, err := s.app.Create(ctx, fmt.Sprint("diff-", i), twoKeyboards); err != nil {
			return err
		}
	}
	return nil
}

func (s *orderSystem) system(orders int) batchtest.System {
	return batchtest.System{One: s.c.Handle, Many: s.c.HandleBatch,
		Act: func(ctx context.Context, name string) error {
			var id uint64
			if _, err := fmt.Sscanf(name, "cancel %d", &id); err != nil {
				return err
			}
			_, _, _, err := s.app.Cancel(ctx, name, id, "customer changed their mind")
			return err
		},
		Prepare: func(ctx context.Context) error { return s.reset(ctx, orders) },
		Rows: func(ctx context.Context) (map[string][]string, error) {
			return batchtest.RowsWithMechanisms(ctx, s.db.DB, map[string]string{
				"orders": `SELECT id, status, status_reason, refund_status, aggregate_version FROM orders ORDER BY id`,
				"history": `SELECT order_id, from_status, to_status, refund_status, trigger_name, actor, reason, event_id,
  emitted_event_id IS NULL FROM order_history ORDER BY order_id, id`,
			})
		}}
}

func TestOrderBatchesDecideAsOneAtATime(t *testing.T) {
	t.Parallel()
	one, many := newOrderSystem(t), newOrderSystem(t)
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(2, 4).Draw(rt, "orders")
		batchtest.Same(rt, one.system(n), many.system(n), orderSteps(rt, n), batchtest.Sizes(rt))
	})
	batchtest.WantBatches(t, many.reg, orderbindings.ConsumerName)
}

// orderSteps draws each order's results as the participants send them:
// reserved or rejected; then paid or declined, maybe the reservation's
// expiry, maybe a late commit failure, a refund; a cancel over the API
// now and then; an order unknown here. They arrive mostly in each order's
// own sequence, interleaved, sometimes in any order.
func orderSteps(t *rapid.T, n int) []batchtest.Step {
	total := twoKeyboardsTotal
	var perOrder [][]batchtest.Item
	for o := uint64(1); o <= uint64(n); o++ {
		var is []batchtest.Item
		add := func(typ events.Type, payload any) {
			is = append(is, batchtest.Events(orderEvent(t, typ, o, payload))...)
		}
		if rapid.IntRange(0, 4).Draw(t, "rejected") == 0 {
			add(events.InventoryRejected, events.InventoryRejectedV1{OrderID: o, Reason: "insufficient stock for SKU-1"})
		} else {
			add(events.InventoryReserved, events.InventoryReservedV1{OrderID: o, CustomerID: "c-1",
				Items: []events.Item{{SKU: "SKU-1", Quantity: 2, UnitPriceCents: 8900}}, AmountCents: total, Currency: "EUR"})
		}
		if rapid.IntRange(0, 3).Draw(t, "expired") == 0 {
			add(events.InventoryReservationExpired, events.InventoryReservationExpiredV1{OrderID: o, Reason: "lease ran out"})
		}
		if rapid.IntRange(0, 3).Draw(t, "cancel over the API") == 0 {
			is = append(is, batchtest.Item{Action: fmt.Sprint("cancel ", o)})
		}
		if rapid.Bool().Draw(t, "paid") {
			add(events.PaymentSucceeded, events.PaymentSucceededV1{OrderID: o, AmountCents: total, Currency: "EUR", ChargeID: fmt.Sprint("ch_", o)})
			if rapid.IntRange(0, 3).Draw(t, "commit failed") == 0 {
				add(events.InventoryCommitFailed, events.InventoryCommitFailedV1{OrderID: o, Reason: "stock gone"})
			}
			if rapid.IntRange(0, 2).Draw(t, "refunded") == 0 {
				add(events.PaymentRefunded, events.PaymentRefundedV1{OrderID: o, AmountCents: total, RefundID: fmt.Sprint("rf_", o)})
			}
		} else {
			add(events.PaymentFailed, events.PaymentFailedV1{OrderID: o, Reason: "card_declined"})
		}
		perOrder = append(perOrder, is)
	}
	if rapid.IntRange(0, 5).Draw(t, "unknown order") == 0 {
		perOrder = append(perOrder, batchtest.Events(orderEvent(t, events.PaymentSucceeded, 99,
			events.PaymentSucceededV1{OrderID: 99, AmountCents: total, Currency: "EUR", ChargeID: "ch_99"})))
	}
	return batchtest.Steps(t, orderbindings.Queue, batchtest.Arrival(t, perOrder))
}

// twoKeyboardsTotal is what twoKeyboards costs in the catalogue.
const twoKeyboardsTotal int64 = 2*8900 + 1*1200

func orderEvent(t *rapid.T, typ events.Type, orderID uint64, payload any) events.Envelope {
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return events.Envelope{EventID: uuid.NewString(), Type: typ, AggregateID: orderID, AggregateVersion: 1,
		SchemaVersion: 1, CorrelationID: fmt.Sprint(orderID), Payload: b}
}
