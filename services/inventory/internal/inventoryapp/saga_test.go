package inventoryapp_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/aids/wrongway"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventoryapp"
)

func TestReserveHoldsEveryItem(t *testing.T) {
	t.Parallel()
	f := setup(t)
	// Lines out of SKU order: the reservation holds them sorted.
	e := created(t, 1, item("SKU-3", 5), item("SKU-1", 2))
	f.process(t, e)

	f.wantStock(t, map[string][2]int64{"SKU-1": {0, 2}, "SKU-3": {0, 5}})
	r := f.reservation(t, 1)
	wantItems := []inventory.Line{{SKU: "SKU-1", Quantity: 2}, {SKU: "SKU-3", Quantity: 5}}
	if r.Status != inventory.Reserved || r.Version != 1 || r.Reason != "" || !reflect.DeepEqual(r.Items, wantItems) {
		t.Errorf("reservation = %+v, want reserved, version 1, items %v", r, wantItems)
	}

	out := f.outbox(t, 1)
	if len(out) != 1 || out[0].Type != events.InventoryReserved || out[0].AggregateVersion != 1 || out[0].AggregateID != 1 {
		t.Fatalf("outbox = %+v, want one inventory.reserved, aggregate 1 version 1", out)
	}
	var p events.InventoryReservedV1
	if err := json.Unmarshal(out[0].Payload, &p); err != nil {
		t.Fatal(err)
	}
	want := events.InventoryReservedV1{OrderID: 1, CustomerID: "c-1", Items: []events.Item{item("SKU-3", 5), item("SKU-1", 2)},
		AmountCents: 7 * 250, Currency: "EUR"}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("InventoryReserved payload = %+v, want %+v", p, want)
	}
	if err := p.Validate(); err != nil {
		t.Errorf("InventoryReserved payload does not validate: %v", err)
	}
	if n := f.count(t, `SELECT COUNT(*) FROM consumer_inbox WHERE consumer_name = 'inventory' AND event_id = ?`, e.EventID); n != 1 {
		t.Errorf("inbox rows for the event = %d, want 1", n)
	}
}

// All or none: when one line cannot be held, the lines held before it (in
// SKU order) are undone, and the rejection is a committed result event.
func TestRejectionHoldsNothing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		items  []events.Item
		reason string
	}{
		{"one item short, after two that fit",
			[]events.Item{item("SKU-LIMITED", 2), item("SKU-1", 3), item("SKU-4", 1)},
			"insufficient stock for SKU-LIMITED: requested 2, available 1"},
		{"unknown sku, after one that fits",
			[]events.Item{item("SKU-NOPE", 1), item("SKU-2", 4)},
			"unknown SKU SKU-NOPE: requested 1"},
		{"sold out, listed before one that fits",
			[]events.Item{item("SKU-SOLDOUT", 1), item("SKU-4", 1)},
			"insufficient stock for SKU-SOLDOUT: requested 1, available 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			f.process(t, created(t, 9, tt.items...))

			f.wantStock(t, nil)
			r := f.reservation(t, 9)
			if r.Status != inventory.Rejected || r.Reason != tt.reason || r.Version != 1 || len(r.Items) != 0 {
				t.Errorf("reservation = %+v, want rejected with reason %q, version 1, no items", r, tt.reason)
			}
			out := f.outbox(t, 9)
			if len(out) != 1 || out[0].Type != events.InventoryRejected || out[0].AggregateVersion != 1 {
				t.Fatalf("outbox = %+v, want one inventory.rejected version 1", out)
			}
			var p events.InventoryRejectedV1
			if err := json.Unmarshal(out[0].Payload, &p); err != nil {
				t.Fatal(err)
			}
			if p.OrderID != 9 || p.Reason != tt.reason {
				t.Errorf("InventoryRejected payload = %+v, want order 9, reason %q", p, tt.reason)
			}
			if n := f.count(t, `SELECT COUNT(*) FROM reservation_items`); n != 0 {
				t.Errorf("reservation_items rows = %d, want 0", n)
			}
		})
	}
}

func TestConfirmCommitsTheSale(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.process(t, created(t, 2, item("SKU-1", 2), item("SKU-2", 10)))
	f.process(t, confirmed(t, 2))

	f.wantStock(t, map[string][2]int64{"SKU-1": {-2, 0}, "SKU-2": {-10, 0}})
	if r := f.reservation(t, 2); r.Status != inventory.Committed || r.Version != 1 {
		t.Errorf("reservation = %+v, want committed, version 1", r)
	}
	if out := f.outbox(t, 2); len(out) != 1 {
		t.Errorf("outbox has %d events, want only the InventoryReserved", len(out))
	}
}

// The cancel undoes what the reservation holds, back to the seed exactly: a
// reserved one is released (with the cancel's reason), a committed one
// restocked. A second cancel (another event id) changes nothing more.
func TestCancelUndoesTheReservation(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		items   []events.Item
		confirm bool
		held    map[string][2]int64 // the stock before the cancel
		want    inventory.Status
		reason  string // what the reservation's reason contains ("": not checked)
	}{
		{"reserved: released", []events.Item{item("SKU-1", 2), item("SKU-LIMITED", 1)}, false,
			map[string][2]int64{"SKU-1": {0, 2}, "SKU-LIMITED": {0, 1}}, inventory.Released, "card declined"},
		{"committed: restocked", []events.Item{item("SKU-3", 7)}, true,
			map[string][2]int64{"SKU-3": {-7, 0}}, inventory.Restocked, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			f.process(t, created(t, 3, tt.items...))
			if tt.confirm {
				f.process(t, confirmed(t, 3))
			}
			f.wantStock(t, tt.held)
			f.process(t, cancelled(t, 3))

			f.wantStock(t, nil) // back to the seed, exactly
			f.wantStatus(t, 3, tt.want)
			if r := f.reservation(t, 3); !strings.Contains(r.Reason, tt.reason) {
				t.Errorf("reservation = %+v, want the cancel's reason", r)
			}
			f.process(t, cancelled(t, 3))
			f.wantStock(t, nil)
		})
	}
}

// The cancel of a confirmed order can overtake its OrderConfirmed (two
// dispatcher workers, many consumer workers: nothing orders one order's
// events on the way). The cancel says the order was confirmed, so the
// reservation ends restocked, not released: the sale and its return. The
// late confirm finds it closed and takes nothing. Seen in the suite: the
// end-to-end cancel-after-confirm test found the reservation released.
func TestCancelOfASaleThatOvertookItsConfirm(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.process(t, created(t, 14, item("SKU-3", 7)))
	cancel := envelope(t, events.OrderCancelled, 14, events.OrderCancelledV1{OrderID: 14, Reason: "customer", AfterConfirm: true})
	cancel.AggregateVersion = 4
	f.process(t, cancel)

	f.wantStock(t, nil)                      // sold and returned: back to the seed
	f.wantStatus(t, 14, inventory.Restocked) // after the cancel of a sale
	confirm := confirmed(t, 14)
	confirm.AggregateVersion = 3
	f.process(t, confirm) // late: changes nothing
	f.wantStock(t, nil)
	f.wantStatus(t, 14, inventory.Restocked) // after the late confirm: still
}

func TestSameEventTwiceReservesOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	e := created(t, 5, item("SKU-1", 3))
	f.process(t, e)
	if err := f.c.Process(context.Background(), e); !errors.Is(err, inbox.ErrAlreadyProcessed) {
		t.Fatalf("second delivery: err = %v, want ErrAlreadyProcessed", err)
	}
	f.wantStock(t, map[string][2]int64{"SKU-1": {0, 3}})
	if out := f.outbox(t, 5); len(out) != 1 {
		t.Errorf("outbox has %d events, want 1", len(out))
	}
}

// The reservation's primary key, not the event id, is the idempotency key
// of the reserve step: a second OrderCreated for the order holds nothing.
func TestTwoCreatesForOneOrderReserveOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.process(t, created(t, 6, item("SKU-1", 3)))
	f.process(t, created(t, 6, item("SKU-1", 3)))

	f.wantStock(t, map[string][2]int64{"SKU-1": {0, 3}})
	if out := f.outbox(t, 6); len(out) != 1 {
		t.Errorf("outbox has %d events, want 1", len(out))
	}
	if n := f.count(t, `SELECT COUNT(*) FROM consumer_inbox`); n != 2 {
		t.Errorf("inbox rows = %d, want 2 (both events processed)", n)
	}
}

// Cancel overtakes create: the cancel leaves a marker (null compensation);
// the late create is recorded as stale and holds nothing (no hanging
// reservation), and no InventoryReserved goes out.
//
// The cancel also records the gap it reveals (version 1 of the order was not
// seen), in its own inbox transaction; the late create resolves it in its.
// This is what the failure lab's out-of-order experiment asserts.
func TestCancelBeforeCreate(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cancel := cancelled(t, 7)
	f.process(t, cancel)
	if r := f.reservation(t, 7); r.Status != inventory.CancelledBeforeReserve || r.Version != 0 {
		t.Fatalf("after the cancel: reservation = %+v, want cancelled_before_reserve, version 0", r)
	}
	gaps := f.gaps(t, 7)
	if len(gaps) != 1 {
		t.Fatalf("gaps after the cancel = %+v, want 1", gaps)
	}
	g := gaps[0]
	if g.Consumer != "inventory" || g.EventID != cancel.EventID || g.EventType != events.OrderCancelled ||
		g.ExpectedVersion != 1 || g.ReceivedVersion != 2 || !g.Open() || g.Overdue ||
		!g.DeadlineAt.Equal(g.DetectedAt.Add(inventoryapp.DefaultGapDeadline)) {
		t.Errorf("gap = %+v, want the cancel (version 2) waiting for version 1, open, due in %s", g, inventoryapp.DefaultGapDeadline)
	}

	late := created(t, 7, item("SKU-1", 2), item("SKU-LIMITED", 1))
	f.process(t, late)

	f.wantStock(t, nil)
	r := f.reservation(t, 7)
	if r.Status != inventory.CancelledBeforeReserve || len(r.Items) != 0 || !strings.Contains(r.Reason, late.EventID) {
		t.Errorf("reservation = %+v, want cancelled_before_reserve, no items, reason naming the late event", r)
	}
	gaps = f.gaps(t, 7)
	if len(gaps) != 1 || gaps[0].Open() || !strings.Contains(gaps[0].Resolution, "recorded as stale") ||
		!strings.Contains(gaps[0].Resolution, late.EventID) {
		t.Errorf("gaps after the late create = %+v, want the one gap resolved, naming the late event", gaps)
	}
	if out := f.outbox(t, 7); len(out) != 0 {
		t.Errorf("outbox = %+v, want no event", out)
	}
	// Neither a confirm nor another cancel moves it.
	f.process(t, confirmed(t, 7))
	f.process(t, cancelled(t, 7))
	f.wantStock(t, nil)
	f.wantStatus(t, 7, inventory.CancelledBeforeReserve)
}

// Events that do not fit the reservation's status change nothing.
func TestStaleEventsChangeNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	// Rejected: a cancel and a confirm have nothing to act on.
	f.process(t, created(t, 10, item("SKU-LIMITED", 5)))
	f.process(t, cancelled(t, 10))
	f.process(t, confirmed(t, 10))
	f.wantStatus(t, 10, inventory.Rejected)
	// Released: a late confirm does not sell released stock.
	f.process(t, created(t, 11, item("SKU-2", 5)))
	f.process(t, cancelled(t, 11))
	f.process(t, confirmed(t, 11))
	f.wantStatus(t, 11, inventory.Released)
	// Committed: a second confirm sells nothing more.
	f.process(t, created(t, 12, item("SKU-4", 5)))
	f.process(t, confirmed(t, 12))
	f.process(t, confirmed(t, 12))
	f.wantStock(t, map[string][2]int64{"SKU-4": {-5, 0}})
}

// A confirm for an order with no reservation can never succeed: it becomes
// a dead letter at once (no retries), and the inbox does not record it.
func TestConfirmWithoutReservationIsDeadLettered(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tests := []struct {
		name   string
		e      events.Envelope
		reason string
	}{
		{"no reservation", confirmed(t, 13), "no reservation"},
		{"invalid payload", envelope(t, events.OrderCreated, 14, map[string]any{"order_id": "14"}), "invalid event"},
		{"unsupported version", func() events.Envelope { e := created(t, 15, item("SKU-1", 1)); e.SchemaVersion = 9; return e }(), "schema_version 9"},
	}
	for _, tt := range tests {
		dec := f.c.Handle(context.Background(), delivery(tt.e))
		if dec.Reason != "" {
			t.Errorf("%s: decision reason %q, want an ack after recording the dead letter", tt.name, dec.Reason)
		}
		var reason string
		if err := f.db.Get(&reason, `SELECT reason FROM dead_letters WHERE event_id = ?`, tt.e.EventID); err != nil {
			t.Fatalf("%s: dead letter: %v", tt.name, err)
		}
		if !strings.Contains(reason, tt.reason) {
			t.Errorf("%s: dead letter reason %q, want it to mention %q", tt.name, reason, tt.reason)
		}
	}
	f.wantStock(t, nil)
	if n := f.count(t, `SELECT COUNT(*) FROM consumer_inbox`); n != 0 {
		t.Errorf("inbox rows = %d, want 0", n)
	}
	// The dead letter is the record of a confirm without a reservation, not
	// a gap: it is not a reordering that waiting could resolve.
	if n := f.count(t, `SELECT COUNT(*) FROM event_gaps`) + f.count(t, `SELECT COUNT(*) FROM reservations`); n != 0 {
		t.Errorf("gap and reservation rows = %d, want 0", n)
	}
}

// delivery is what the broker hands the consumer for e.
func delivery(e events.Envelope) rabbit.Delivery {
	return inboxtest.Delivery("inventory.order-events", e)
}

// An error after the business SQL, before commit, rolls back the holds, the
// reservation, the outbox row and the inbox row together; the redelivery
// then reserves once.
func TestFailureBeforeCommitLeavesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	reg := failpoint.NewRegistry()
	reg.Error("inbox.after-effect-before-commit", 1)
	ctx := failpoint.WithRegistry(context.Background(), reg)
	e := created(t, 16, item("SKU-1", 2), item("SKU-2", 2))
	if err := f.c.Process(ctx, e); !errors.Is(err, failpoint.ErrInjected) {
		t.Fatalf("Process = %v, want the injected error", err)
	}
	f.wantStock(t, nil)
	if n := f.count(t, `SELECT COUNT(*) FROM reservations`) + f.count(t, `SELECT COUNT(*) FROM outbox_events`) +
		f.count(t, `SELECT COUNT(*) FROM consumer_inbox`); n != 0 {
		t.Errorf("rows left after the rollback: %d, want 0", n)
	}
	if err := f.c.Process(ctx, e); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	f.wantStock(t, map[string][2]int64{"SKU-1": {0, 2}, "SKU-2": {0, 2}})
}

// The wrong way (wrongway.IgnoreOrder): without the cancel marker, the late
// create reserves stock for an order that is already cancelled, and no event
// will ever release it. This is the anomaly TestCancelBeforeCreate rules out.
func TestIgnoreOrderLeavesAHangingReservation(t *testing.T) {
	t.Parallel()
	ww := wrongway.NewSet(nil)
	f := setupWrongWay(t, ww)
	ww.Replace(map[wrongway.Switch]bool{wrongway.IgnoreOrder: true}) // flipped at run time, as the lab does
	f.process(t, cancelled(t, 17))
	f.process(t, created(t, 17, item("SKU-1", 2)))

	f.wantStock(t, map[string][2]int64{"SKU-1": {0, 2}}) // held for a cancelled order
	f.wantStatus(t, 17, inventory.Reserved)              // the anomaly
	if out := f.outbox(t, 17); len(out) != 1 || out[0].Type != events.InventoryReserved {
		t.Errorf("outbox = %+v, want the InventoryReserved of a cancelled order", out)
	}
	// Nor does the wrong way keep books of what it did not see.
	if n := f.count(t, `SELECT COUNT(*) FROM event_gaps`); n != 0 {
		t.Errorf("gap rows = %d, want 0: ignore-order skips the gap bookkeeping", n)
	}
}
