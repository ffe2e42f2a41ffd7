package lab

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/outbox"
)

// The chapter's acceptance rule (本地故障实验：先定义断言): SELECT COUNT(*)
// only proves how many rows there are; an experiment also checks the
// quantities, the amounts, the business states and that no extra side
// effect happened. Books is the evidence for one order, read from the three
// services' APIs; the check functions below compare it with what the order
// must have left behind, one check per kind, so a report says which kind
// broke.

// Books is what the three services recorded about one order.
type Books struct {
	OrderID     string
	Order       Order // the zero Order when it does not exist
	OrderCode   int   // GET /orders/{id}: 200, or 404 for no such order
	Reservation Reservation
	Payment     Payment
	Charges     []Charge
	Refunds     []Refund               // of every charge
	Outbox      map[string][]OutboxRow // service -> the order's outbox rows
	Inbox       []InboxRow             // every consumer's rows for those events
}

// books reads an order's books in the three services.
func (l *Lab) books(ctx context.Context, id string) (Books, error) {
	b := Books{OrderID: id, Outbox: map[string][]OutboxRow{}}
	var err error
	if b.Order, b.OrderCode, err = l.order(ctx, id); err != nil {
		return b, err
	}
	if b.Reservation, err = l.reservation(ctx, id); err != nil {
		return b, err
	}
	if b.Payment, err = l.payment(ctx, id); err != nil {
		return b, err
	}
	if b.Charges, err = l.charges(ctx, id); err != nil {
		return b, err
	}
	for _, c := range b.Charges {
		f, err := l.refunds(ctx, c.ChargeID)
		if err != nil {
			return b, err
		}
		b.Refunds = append(b.Refunds, f...)
	}
	var ids []string
	for _, svc := range Services {
		rows, err := l.outbox(ctx, svc, id)
		if err != nil {
			return b, err
		}
		b.Outbox[svc] = rows
		for _, r := range rows {
			ids = append(ids, r.EventID)
		}
	}
	for _, svc := range Services {
		rows, err := l.inbox(ctx, svc, ids)
		if err != nil {
			return b, err
		}
		b.Inbox = append(b.Inbox, rows...)
	}
	return b, nil
}

// quietBooks waits until no event of the order waits in an outbox (pending
// or sending), then returns its books: what a reader compares once the saga
// is at rest.
func (l *Lab) quietBooks(ctx context.Context, id string) (Books, error) {
	var b Books
	err := l.waitFor(ctx, "every event of order "+id+" to leave its outbox", func() (bool, error) {
		var err error
		if b, err = l.books(ctx, id); err != nil {
			return false, err
		}
		for _, rows := range b.Outbox {
			for _, r := range rows {
				if r.Status == outbox.StatusPending || r.Status == outbox.StatusSending {
					return false, nil
				}
			}
		}
		return true, nil
	})
	return b, err
}

// consumersOf names who processes each event type, by the inbox's
// consumer_name (docs/contract.md, "Exchanges and queues").
var consumersOf = map[string][]string{
	events.OrderCreated:                {"inventory"},
	events.OrderConfirmed:              {"inventory"},
	events.OrderCancelled:              {"inventory", "payment"},
	events.InventoryReserved:           {"order", "payment"},
	events.InventoryRejected:           {"order"},
	events.InventoryReservationExpired: {"order"},
	events.InventoryCommitFailed:       {"order"},
	events.PaymentChargeRequested:      {"payment-psp"},
	events.PaymentSucceeded:            {"order"},
	events.PaymentFailed:               {"order"},
	events.PaymentRefundRequested:      {"payment-refunds"},
	events.PaymentRefunded:             {"order"},
}

// Events is the outbox events an order must have left, by service.
type Events map[string][]string

// saleEvents are the events of a confirmed order.
var saleEvents = Events{
	"order":     {events.OrderCreated, events.OrderConfirmed},
	"inventory": {events.InventoryReserved},
	"payment":   {events.PaymentChargeRequested, events.PaymentSucceeded},
}

// checkSale checks the books of an order of qty units of sku that was
// confirmed: states, amount, the order's stock and side effects (want: the
// events it must have left; nil for saleEvents). Everything it reads is the
// order's own: its reservation and charges, never a SKU's total stock,
// which other orders move too.
func (r *Report) checkSale(b Books, sku string, qty int, want Events) {
	if want == nil {
		want = saleEvents
	}
	r.checkStates(b, "confirmed", "committed", "succeeded")
	r.checkPaidOnce(b, sku, qty)
	r.check(b.Reservation.Status == "committed" && reserves(b.Reservation, sku, qty), chkSoldOnce, b.OrderID, lines(b.Reservation))
	r.checkEvents(b, want)
	r.checkConsumedOnce(b)
}

// checkStates checks the order's, the reservation's and the payment's
// statuses ("" for "no such record").
func (r *Report) checkStates(b Books, order, reservation, payment string) {
	r.check(b.Order.Status == order && b.Reservation.Status == reservation && b.Payment.Status == payment, chkStates,
		orNone(order), orNone(reservation), orNone(payment),
		b.OrderID, orNone(b.Order.Status), orNone(b.Reservation.Status), orNone(b.Payment.Status))
}

// checkPaidOnce checks the money of a confirmed order of qty units of sku:
// its total is its line's price, the payment is of that total, and the PSP
// holds exactly one succeeded charge of it and no refund.
func (r *Report) checkPaidOnce(b Books, sku string, qty int) {
	var total int64
	for _, it := range b.Order.Items {
		total += int64(it.Quantity) * it.UnitPriceCents
	}
	line := len(b.Order.Items) == 1 && b.Order.Items[0].SKU == sku && b.Order.Items[0].Quantity == qty
	one := len(b.Charges) == 1 && b.Charges[0].Status == "succeeded" && b.Charges[0].AmountCents == total
	r.check(line && total > 0 && b.Order.TotalCents == total && b.Payment.AmountCents == total && one && len(b.Refunds) == 0,
		chkPaidOnce, b.Order.TotalCents, items(b.Order.Items), b.Payment.AmountCents, charges(b.Charges), refunds(b.Refunds))
}

// checkNothingCharged checks that no money moved for the order.
func (r *Report) checkNothingCharged(b Books) {
	r.check(len(b.Charges) == 0 && len(b.Refunds) == 0, chkNothingPaid, charges(b.Charges), refunds(b.Refunds), orNone(b.Payment.Status))
}

// checkNothingHeld checks, with label l, that the order's reservation
// holds no stock: there is none, or it ended without taking any.
func (r *Report) checkNothingHeld(l Label, orderID string, res Reservation) {
	r.check(holdsNothing(res), l, orderID, lines(res))
}

// holdsNothing reports whether a reservation holds no stock.
func holdsNothing(res Reservation) bool {
	switch res.Status {
	case "", "rejected", "cancelled_before_reserve", "released", "expired":
		return true
	}
	return false
}

// checkEvents checks that each service's outbox holds exactly the events
// want names for the order (each once), every one sent.
func (r *Report) checkEvents(b Books, want Events) {
	ok := true
	var got []string
	for _, svc := range Services {
		var types []string
		for _, row := range b.Outbox[svc] {
			types = append(types, row.EventType)
			if row.Status != outbox.StatusSent {
				ok = false
				types[len(types)-1] += " (" + row.Status + ")"
			}
		}
		slices.Sort(types)
		w := slices.Clone(want[svc])
		slices.Sort(w)
		if !slices.Equal(types, w) {
			ok = false
		}
		got = append(got, svc+": "+orNone(strings.Join(types, ", ")))
	}
	r.check(ok, chkEventsOnce, strings.Join(got, "; "))
}

// checkConsumedOnce checks the inbox rows of the order's sent events: one
// per consumer of each event, and none for anyone else.
func (r *Report) checkConsumedOnce(b Books) {
	seen := map[string]int{} // consumer/event_id -> rows
	for _, row := range b.Inbox {
		seen[row.Consumer+"/"+row.EventID]++
	}
	var bad []string
	sent, want := 0, 0
	for _, svc := range Services {
		for _, row := range b.Outbox[svc] {
			if row.Status != outbox.StatusSent {
				continue
			}
			sent++
			for _, c := range consumersOf[row.EventType] {
				want++
				if n := seen[c+"/"+row.EventID]; n != 1 {
					bad = append(bad, fmt.Sprintf("%s processed %s %s %d time(s)", c, row.EventType, short(row.EventID), n))
				}
				delete(seen, c+"/"+row.EventID)
			}
		}
	}
	for k, n := range seen {
		bad = append(bad, fmt.Sprintf("unexpected inbox row(s) %s: %d", k, n))
	}
	slices.Sort(bad)
	detail := fmt.Sprintf("%d events, %d inbox rows, each event processed once by each of its consumers", sent, len(b.Inbox))
	if len(bad) > 0 {
		detail = strings.Join(bad, "; ")
	}
	r.check(len(bad) == 0 && len(b.Inbox) == want, chkConsumedOnce, detail)
}

// outboxRow returns the order's event of type typ in svc's outbox.
func (b Books) outboxRow(svc, typ string) (OutboxRow, bool) {
	for _, r := range b.Outbox[svc] {
		if r.EventType == typ {
			return r, true
		}
	}
	return OutboxRow{}, false
}

// inboxRows counts consumer's inbox rows for one event.
func (b Books) inboxRows(consumer, eventID string) int {
	n := 0
	for _, r := range b.Inbox {
		if r.Consumer == consumer && r.EventID == eventID {
			n++
		}
	}
	return n
}

func reserves(res Reservation, sku string, qty int) bool {
	return len(res.Items) == 1 && res.Items[0].SKU == sku && res.Items[0].Quantity == qty
}

func lines(res Reservation) string {
	var out []string
	for _, it := range res.Items {
		out = append(out, fmt.Sprintf("%d × %s", it.Quantity, it.SKU))
	}
	return orNone(res.Status) + " [" + strings.Join(out, ", ") + "]"
}

func items(its []Item) string {
	var out []string
	for _, it := range its {
		out = append(out, fmt.Sprintf("%d × %s at %d¢", it.Quantity, it.SKU, it.UnitPriceCents))
	}
	return "[" + strings.Join(out, ", ") + "]"
}

func charges(cs []Charge) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s %d¢", c.Status, c.AmountCents))
	}
	return fmt.Sprintf("%d %v", len(cs), out)
}

func refunds(fs []Refund) string {
	var out []string
	for _, f := range fs {
		out = append(out, fmt.Sprintf("%s %d¢", f.Status, f.AmountCents))
	}
	return fmt.Sprintf("%d %v", len(fs), out)
}

// settle waits until the order is confirmed, its stock sold and its events
// all sent, records its books as a section titled title, and checks them as
// the sale of qty units of sku (want: its events; nil for saleEvents).
func (l *Lab) settle(ctx context.Context, r *Report, title, id, sku string, qty int, want Events) (Books, error) {
	if err := l.waitSettled(ctx, id); err != nil {
		return Books{}, err
	}
	b, err := l.quietBooks(ctx, id)
	if err != nil {
		return b, err
	}
	r.Sections = append(r.Sections, l.snapshot(ctx, title, id, sku))
	r.checkSale(b, sku, qty, want)
	return b, nil
}

// begin records sku's stock before the fault as the first section: the
// reader's context; no check reads a SKU's totals, which other orders move.
func (l *Lab) begin(ctx context.Context, r *Report, sku string) {
	r.Sections = append(r.Sections, l.snapshot(ctx, "before the fault", "", sku))
}
