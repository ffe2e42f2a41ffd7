package chaos

import (
	"fmt"
	"time"
)

// This file is data: the sample world the selftest plants violations into
// (plants.go). cmd/chaos -selftest checks it at run time, so it is not test
// code. Each order is written out in full, as the services would record it.

// SampleSnapshot is a small consistent world, as a clean run would leave
// it: one order of each kind, every record agreeing, stock conserved. The
// selftest and the unit tests plant violations into copies of it.
func SampleSnapshot() Snapshot {
	w := sampleWorld{t0: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), s: Snapshot{
		Orders:       map[string]Order{},
		StockStart:   map[string]Stock{"SKU-1": {OnHand: 100, Available: 100}, "SKU-2": {OnHand: 500, Available: 500}, ScarceSKU: {OnHand: 1, Available: 1}, SoldOutSKU: {}},
		Receipts:     map[string]int{},
		MinAvailable: map[string]int{"SKU-1": 95, "SKU-2": 497, ScarceSKU: 0, SoldOutSKU: 0},
		Services: map[string]Leftovers{"order": {Outbox: map[string]int64{}}, "inventory": {Outbox: map[string]int64{}},
			"payment": {Outbox: map[string]int64{}}},
		Rest: Rest{Reached: true, After: 3 * time.Second},
	}}
	w.happyAndRejected()
	w.declinedAndCancelled()
	w.replayedAndConflicting()
	// Sold: order 1 (2 x SKU-1), 3 (the scarce unit), 7 and 8 (SKU-2);
	// order 6 was sold and restocked.
	w.s.StockEnd = map[string]Stock{"SKU-1": {OnHand: 98, Available: 98}, "SKU-2": {OnHand: 498, Available: 498},
		ScarceSKU: {OnHand: 0, Available: 0}, SoldOutSKU: {}}
	w.s.Faults, w.s.Processes = sampleFaults()
	return w.s
}

// sampleWorld builds the sample snapshot, one request and its order at a
// time, with times counted from t0.
type sampleWorld struct {
	t0 time.Time
	s  Snapshot
}

func (w *sampleWorld) at(ms int) time.Time { return w.t0.Add(time.Duration(ms) * time.Millisecond) }

func (w *sampleWorld) created(ms int) Change {
	return Change{To: statusPendingInventory, Trigger: "created", Actor: "api", At: w.at(ms)}
}

func (w *sampleWorld) move(from, to, trigger, event string, ms int) Change {
	return Change{From: from, To: to, Trigger: trigger, Actor: "consumer", EventID: event, At: w.at(ms)}
}

func sampleEvent(svc, typ string, v uint64) Event {
	return Event{Service: svc, EventID: fmt.Sprintf("%s-%s-%d", svc, typ, v), Type: typ, Version: v, Status: "sent", Attempts: 1}
}

// confirmed fills in the records of an order that ended confirmed.
func (w *sampleWorld) confirmed(o Order, items []Line) Order {
	ev := sampleEvent
	o.Status, o.RefundStatus = statusConfirmed, "none"
	o.Reservation = &Reservation{Status: "committed", Items: items}
	o.Payment = &Payment{Status: "succeeded", AmountCents: o.TotalCents}
	o.Charges = []Charge{{ChargeID: "ch_" + o.ID, Status: "succeeded", AmountCents: o.TotalCents}}
	o.History = []Change{w.created(0), w.move(statusPendingInventory, statusAwaitingPayment, "inventory_reserved", "e-res-"+o.ID, 20),
		w.move(statusAwaitingPayment, statusConfirmed, "payment_succeeded", "e-pay-"+o.ID, 40)}
	o.Outbox = []Event{ev("order", "order.created", 1), ev("inventory", "inventory.reserved", 1),
		ev("payment", "payment.charge-requested", 1), ev("payment", "payment.succeeded", 2), ev("order", "order.confirmed", 2)}
	return o
}

// rejected is the order inventory turned down.
func (w *sampleWorld) rejected(id string, total int64) Order {
	ev := sampleEvent
	return Order{ID: id, Status: statusRejected, RefundStatus: "none", TotalCents: total,
		Reservation: &Reservation{Status: "rejected"}, Charges: []Charge{},
		History: []Change{w.created(0), w.move(statusPendingInventory, statusRejected, "inventory_rejected", "e-rej-"+id, 20)},
		Outbox:  []Event{ev("order", "order.created", 1), ev("inventory", "inventory.rejected", 1)}}
}

// add puts a request and its order into the snapshot, with the customer
// its kind implies and, unless given, one accepting answer.
func (w *sampleWorld) add(r Request, o Order) {
	r.Customer, o.Customer = "chaos-t-"+r.Key, "chaos-t-"+r.Key
	if r.Kind == KindDecline {
		r.Customer, o.Customer = "decline-"+r.Customer, "decline-"+o.Customer
	}
	if r.Creates == nil {
		r.Creates = []Answer{{At: time.Second, Status: 202, OrderID: o.ID, Total: o.TotalCents}}
	}
	r.Sent = w.t0
	w.s.Requests = append(w.s.Requests, r)
	w.s.Orders[o.ID] = o
}

// happyAndRejected: a happy order, one for a sold-out SKU, and the two
// orders that raced for the one scarce unit.
func (w *sampleWorld) happyAndRejected() {
	happyItems := []Line{{SKU: "SKU-1", Quantity: 2}}
	w.add(Request{Key: "happy", Kind: KindHappy, Items: happyItems}, w.confirmed(Order{ID: "1", TotalCents: 17800}, happyItems))
	w.add(Request{Key: "insufficient", Kind: KindInsufficient, Items: []Line{{SKU: SoldOutSKU, Quantity: 1}, {SKU: "SKU-1", Quantity: 1}}},
		w.rejected("2", 10400))
	scarce := []Line{{SKU: ScarceSKU, Quantity: 1}}
	w.add(Request{Key: "scarce-won", Kind: KindScarce, Items: scarce}, w.confirmed(Order{ID: "3", TotalCents: 5000}, scarce))
	w.add(Request{Key: "scarce-lost", Kind: KindScarce, Items: scarce}, w.rejected("4", 5000))
}

// declinedAndCancelled: an order whose card the PSP declined, and one the
// customer cancelled after it was confirmed (refunded, restocked).
func (w *sampleWorld) declinedAndCancelled() {
	ev := sampleEvent
	oneSKU1 := []Line{{SKU: "SKU-1", Quantity: 1}}
	w.add(Request{Key: "decline", Kind: KindDecline, Items: oneSKU1},
		Order{ID: "5", Status: statusCancelled, StatusReason: "payment failed: card_declined", RefundStatus: "none", TotalCents: 8900,
			Reservation: &Reservation{Status: "released", Items: oneSKU1},
			Payment:     &Payment{Status: "failed", AmountCents: 8900},
			Charges:     []Charge{{ChargeID: "ch_5", Status: "declined", AmountCents: 8900}},
			History: []Change{w.created(0), w.move(statusPendingInventory, statusAwaitingPayment, "inventory_reserved", "e-res-5", 20),
				w.move(statusAwaitingPayment, statusCancelled, "payment_failed", "e-pay-5", 40)},
			Outbox: []Event{ev("order", "order.created", 1), ev("inventory", "inventory.reserved", 1), ev("payment", "payment.charge-requested", 1),
				ev("payment", "payment.failed", 2), ev("order", "order.cancelled", 2), ev("inventory", "inventory.released", 2)}})

	cancelled := w.confirmed(Order{ID: "6", TotalCents: 8900}, oneSKU1)
	cancelled.Status, cancelled.RefundStatus, cancelled.StatusReason = statusCancelled, "refunded", "cancelled by the customer"
	cancelled.Reservation.Status = "restocked"
	cancelled.Payment = &Payment{Status: "refunded", AmountCents: 8900, RefundStatus: "succeeded"}
	cancelled.Charges[0].RefundedCents = 8900
	cancelled.History = append(cancelled.History, Change{From: statusConfirmed, To: statusCancelled, Trigger: "cancel_requested", Actor: "api", At: w.at(900)},
		w.move(statusCancelled, statusCancelled, "payment_refunded", "e-refund-6", 950))
	cancelled.Outbox = append(cancelled.Outbox, ev("order", "order.cancelled", 3), ev("payment", "payment.refund-requested", 3),
		ev("payment", "payment.refunded", 4))
	w.add(Request{Key: "cancel", Kind: KindCancel, Items: oneSKU1,
		Cancels: []Answer{{At: 2 * time.Second, Status: 202, OrderID: "6", Result: "cancelled"}}}, cancelled)
}

// replayedAndConflicting: a create sent four times under one key, and a
// key used again with another body.
func (w *sampleWorld) replayedAndConflicting() {
	oneSKU2 := []Line{{SKU: "SKU-2", Quantity: 1}}
	w.add(Request{Key: "replay", Kind: KindReplay, Items: oneSKU2, Creates: []Answer{
		{At: time.Second, Status: 202, OrderID: "7", Total: 1200},
		{At: time.Second, Status: 202, OrderID: "7", Total: 1200, Replayed: true},
		{At: time.Second, Status: 202, OrderID: "7", Total: 1200, Replayed: true},
		{At: 3 * time.Second, Status: 202, OrderID: "7", Total: 1200, Replayed: true}}},
		w.confirmed(Order{ID: "7", TotalCents: 1200}, oneSKU2))
	w.add(Request{Key: "conflict", Kind: KindConflict, Items: oneSKU2,
		Conflicts: []Answer{{At: 2 * time.Second, Status: 422, Error: "idempotency key already used for a different request"}}},
		w.confirmed(Order{ID: "8", TotalCents: 1200}, oneSKU2))
}

// sampleFaults are one fault of each kind that must reach something, as a
// clean run records them: order killed once (its second process), the
// copies of an event in one take at every consumer, a retry waiting in
// the tier whose leader died, an outage in which a delivery gave up and
// was applied after it.
func sampleFaults() ([]FaultRecord, map[string]int) {
	var takes []CopyTake
	for i, c := range Consumers {
		takes = append(takes, CopyTake{Consumer: c.Name, EventID: fmt.Sprintf("e-copy-%d", i), Type: string(c.Keys[0]), Copies: 2,
			Fillers: fillersPerInstance, Seen: true, Applied: 1})
	}
	return []FaultRecord{
			{Fault: Fault{At: time.Second, Kind: FaultKill, Target: "order"}, Started: time.Second, Detail: "SIGKILL pid 1, serving again as pid 2"},
			{Fault: Fault{At: 2 * time.Second, Kind: FaultCopyTake, Target: "all"}, Started: 2 * time.Second, CopyTakes: takes},
			{Fault: Fault{At: 3 * time.Second, Kind: FaultNodeKill, Target: "retry:inventory"}, Started: 3 * time.Second,
				Retry: &RetryInFlight{Consumer: "inventory", Tier: "inventory.order-events.delay.3", Node: "n1", Waiting: 3}},
			{Fault: Fault{At: 4 * time.Second, Kind: FaultDBOutage, Target: "payment", Hold: outageCap}, Started: 4 * time.Second,
				Outage: &Outage{Service: "payment", Account: "'payment_svc'@'%'", Held: 40 * time.Second,
					GaveUp: []GaveUp{{Consumer: "payment", EventID: "e-res-1", OrderID: "1", Attempt: 8, Settled: "applied"}}}},
		},
		map[string]int{"order": 2, "inventory": 1, "payment": 1}
}
