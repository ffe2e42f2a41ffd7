package orderapp_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/instance"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderapp"
)

// The timeline of an order whose payment was charged and then refunded:
// every record of the three services, each where it happened, in time
// order; a peer that cannot be asked is a warning, not an error.
func TestTimelineMergesTheThreeServicesInTimeOrder(t *testing.T) {
	t.Parallel()
	r := newRecon(t)
	o := r.awaitingPayment(t, "timeline")
	own := r.outbox(t)
	if len(own) != 1 {
		t.Fatalf("order outbox = %+v, want order.created only", own)
	}
	r.chargedAndRefunded(o.ID, own[0].EventID)

	tl, err := r.app.Timeline(context.Background(), o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if tl.OrderID != fmt.Sprint(o.ID) || tl.Status != string(order.AwaitingPayment) || len(tl.Warnings) != 0 {
		t.Fatalf("timeline = %s %s warnings %v, want order %d awaiting_payment, no warnings", tl.OrderID, tl.Status, tl.Warnings, o.ID)
	}
	var got []string
	for _, e := range tl.Entries {
		got = append(got, e.Service+" "+e.Kind)
	}
	want := []string{
		// The order service's own records, before the peers' (database time).
		"order " + orderapp.KindOrderCreated,
		"order " + orderapp.KindOutboxWritten,
		"order " + orderapp.KindOrderTransition,
		// The peers', by their times; at(1) and at(5) twice each, in the
		// order of one transaction: inbox row, change, outbox row.
		"inventory " + orderapp.KindInboxProcessed,
		"inventory " + orderapp.KindReservationCreated,
		"inventory " + orderapp.KindOutboxWritten,
		"inventory " + orderapp.KindOutboxSent,
		"payment " + orderapp.KindInboxProcessed,
		"payment " + orderapp.KindPaymentCreated,
		"payment " + orderapp.KindPaymentUpdated,
		"payment " + orderapp.KindOutboxWritten,
		"payment " + orderapp.KindRefundRequested,
		"payment " + orderapp.KindRefundUpdated,
		"inventory " + orderapp.KindReservationUpdated,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !slices.IsSortedFunc(tl.Entries, func(x, y orderapp.TimelineEntry) int { return x.At.Compare(y.At) }) {
		t.Fatalf("entries not in time order: %v", tl.Entries)
	}
	in := tl.Entries[3].Detail
	if in["event_id"] != own[0].EventID || in["event_type"] != events.OrderCreated || in["from"] != "order" || in["consumer"] != "inventory" {
		t.Fatalf("inventory's inbox entry = %v, want order.created from order", in)
	}
	if d := tl.Entries[10].Detail; d["event_id"] != "pay-1" || d["status"] != "pending" || d["total_attempts"] != 10 || d["requeues"] != 1 {
		t.Fatalf("payment's outbox entry = %v, want pay-1 pending, put back once after 10 attempts", d)
	}
	if d := tl.Entries[12].Detail; d["status"] != "succeeded" || d["psp_refund_id"] != "re_1" {
		t.Fatalf("refund entry = %v", d)
	}

	// Inventory down: its records are missing and say why.
	r.inventory.status[fmt.Sprint(o.ID)] = http.StatusInternalServerError
	tl, err = r.app.Timeline(context.Background(), o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.Warnings) != 1 || !strings.Contains(tl.Warnings[0], "500") {
		t.Fatalf("warnings = %v, want inventory's 500", tl.Warnings)
	}
	for _, e := range tl.Entries {
		if strings.HasPrefix(e.Kind, "reservation.") {
			t.Fatalf("entry %v from a reservation inventory did not give", e)
		}
	}
}

// chargedAndRefunded gives the peers the records of an order whose stock
// was reserved and committed and whose payment was charged and refunded, at
// times after everything the order service did (an hour ahead, second by
// second); consumed is the order.created event inventory consumed.
func (r *recon) chargedAndRefunded(orderID uint64, consumed string) {
	base := time.Now().UTC().Add(time.Hour).Truncate(time.Microsecond)
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	r.inventory.setOutbox(orderID, map[string]any{"event_id": "inv-1", "aggregate_version": 1, "event_type": events.InventoryReserved,
		"status": "sent", "attempts": 1, "created_at": at(2), "sent_at": at(3)})
	r.inventory.inbox = []map[string]any{{"consumer": "inventory", "event_id": consumed, "processed_at": at(1)}}
	r.inventory.set(orderID, map[string]any{"status": "committed", "reason": "", "expires_at": at(60), "expired_at": nil,
		"created_at": at(1), "updated_at": at(9)})
	r.payment.setOutbox(orderID, map[string]any{"event_id": "pay-1", "aggregate_version": 1, "event_type": events.PaymentSucceeded,
		"status": "pending", "attempts": 0, "total_attempts": 10, "requeues": 1, "created_at": at(5), "sent_at": nil})
	r.payment.inbox = []map[string]any{{"consumer": "payment", "event_id": "inv-1", "processed_at": at(4)}}
	pay := payment(order.PaySucceeded)
	pay["created_at"], pay["updated_at"] = at(4), at(5)
	pay["refund"] = map[string]any{"status": "succeeded", "amount_cents": 19000, "psp_refund_id": "re_1",
		"created_at": at(7), "updated_at": at(8)}
	r.payment.set(orderID, pay)
}

// The timeline names the instance that acted where a row records it: the
// order's changes (order_history.instance), an inbox row
// (consumer_inbox.instance) and the dispatcher that sent an event
// (outbox_events.claimed_by), as the peers' admin APIs answer them.
func TestTimelineNamesTheInstanceThatActed(t *testing.T) {
	t.Parallel()
	r := newRecon(t)
	o, _, err := r.app.Create(instance.With(context.Background(), "order-2"), "instance-named", twoKeyboards)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().UTC().Add(time.Hour).Truncate(time.Microsecond)
	r.inventory.setOutbox(o.ID, map[string]any{"event_id": "inv-1", "aggregate_version": 1, "event_type": events.InventoryReserved,
		"status": "sent", "attempts": 1, "created_at": base, "sent_at": base.Add(time.Second), "claimed_by": "inventory-2"})
	own := r.outbox(t) // order.created, which inventory consumed
	r.inventory.inbox = []map[string]any{{"consumer": "inventory", "event_id": own[0].EventID, "processed_at": base, "instance": "inventory-1"}}

	tl, err := r.app.Timeline(context.Background(), o.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"order " + orderapp.KindOrderCreated:       "order-2",
		"inventory " + orderapp.KindOutboxSent:     "inventory-2",
		"inventory " + orderapp.KindInboxProcessed: "inventory-1",
	}
	for _, e := range tl.Entries {
		k := e.Service + " " + e.Kind
		if w, ok := want[k]; ok {
			if e.Detail["instance"] != w {
				t.Errorf("%s: instance %v, want %s", k, e.Detail["instance"], w)
			}
			delete(want, k)
		}
	}
	if len(want) > 0 {
		t.Errorf("entries missing: %v\n%v", want, tl.Entries)
	}
}
