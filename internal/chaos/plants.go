package chaos

import (
	"slices"
	"time"
)

// This file is a data table: the selftest's planted violations, one for
// every rule of every check. cmd/chaos -selftest runs them at run time, so
// they are not test code; each is a short edit of the sample snapshot
// (sample.go), kept one row each so a reader sees the whole list at once.

// Plants returns one planted violation for every rule of every check.
func Plants() []Plant { return slices.Clone(plants) }

var plants = []Plant{
	{CheckOutcome, "missing", "an accepted order is gone", func(s *Snapshot) { delete(s.Orders, "1") }},
	{CheckOutcome, "not-terminal", "an order stuck in awaiting_payment", func(s *Snapshot) {
		plantOrder(s, "7", func(o *Order) { o.Status = statusAwaitingPayment })
	}},
	{CheckOutcome, "unexpected", "a plentiful order ends rejected", func(s *Snapshot) {
		plantRequest(s, "scarce-lost", func(r *Request) { r.Kind = KindHappy })
	}},
	{CheckOutcome, "total", "the total changed after the answer", func(s *Snapshot) {
		plantRequest(s, "happy", func(r *Request) { r.Creates[0].Total = 17000 })
	}},
	{CheckIdempotency, "split", "a replay answered with another order id", func(s *Snapshot) {
		plantRequest(s, "replay", func(r *Request) { r.Creates[2].OrderID = "9" })
	}},
	{CheckIdempotency, "duplicate", "a second order stored for one key", func(s *Snapshot) {
		dup := s.Orders["7"]
		dup.ID = "9"
		s.Orders["9"] = dup
	}},
	{CheckIdempotency, "created-twice", "two answers created the order", func(s *Snapshot) {
		plantRequest(s, "replay", func(r *Request) { r.Creates[3].Replayed = false })
	}},
	{CheckIdempotency, "conflict-accepted", "another body accepted under the same key", func(s *Snapshot) {
		plantRequest(s, "conflict", func(r *Request) { r.Conflicts[0] = Answer{Status: 202, OrderID: "8"} })
	}},
	{CheckStock, "on-hand", "one unit of SKU-1 vanished", func(s *Snapshot) {
		plantStock(s, "SKU-1", func(st *Stock) { st.OnHand--; st.Available-- })
	}},
	{CheckStock, "reserved", "a unit of SKU-2 still reserved", func(s *Snapshot) {
		plantStock(s, "SKU-2", func(st *Stock) { st.Reserved++; st.Available-- })
	}},
	{CheckStock, "negative", "available went below zero while running", func(s *Snapshot) { s.MinAvailable[ScarceSKU] = -1 }},
	{CheckStock, "undersold", "a scarce order rejected while a unit stayed on the shelf", func(s *Snapshot) {
		s.Receipts[ScarceSKU] = 1 // a second unit came, and no order took it
		plantStock(s, ScarceSKU, func(st *Stock) { st.OnHand, st.Available = 1, 1 })
	}},
	{CheckPSP, "charges", "a confirmed order charged twice", func(s *Snapshot) {
		plantOrder(s, "1", func(o *Order) {
			o.Charges = append(o.Charges, Charge{ChargeID: "ch_1b", Status: "succeeded", AmountCents: o.TotalCents})
		})
	}},
	{CheckPSP, "amount", "a charge of the wrong amount", func(s *Snapshot) {
		plantOrder(s, "7", func(o *Order) { o.Charges[0].AmountCents = 1100 })
	}},
	{CheckPSP, "not-refunded", "a cancelled order's charge half refunded", func(s *Snapshot) {
		plantOrder(s, "6", func(o *Order) { o.Charges[0].RefundedCents = 4000 })
	}},
	{CheckPSP, "payment-record", "a rejected order has a payment", func(s *Snapshot) {
		plantOrder(s, "2", func(o *Order) { o.Payment = &Payment{Status: "failed", AmountCents: o.TotalCents} })
	}},
	{CheckReservation, "missing", "inventory has no record of a rejected order", func(s *Snapshot) {
		plantOrder(s, "2", func(o *Order) { o.Reservation = nil })
	}},
	{CheckReservation, "mismatch", "a cancelled order's stock still reserved", func(s *Snapshot) {
		plantOrder(s, "5", func(o *Order) { o.Reservation.Status = "reserved" })
	}},
	{CheckReservation, "items", "a committed reservation holds other quantities", func(s *Snapshot) {
		plantOrder(s, "1", func(o *Order) { o.Reservation.Items = []Line{{SKU: "SKU-1", Quantity: 1}} })
	}},
	{CheckLeftovers, "outbox", "an outbox row still pending", func(s *Snapshot) {
		plantLeftovers(s, "order", func(l *Leftovers) { l.Outbox["pending"] = 1 })
	}},
	{CheckLeftovers, "dead-letter", "a dead letter", func(s *Snapshot) { plantLeftovers(s, "inventory", func(l *Leftovers) { l.DeadLetters = plantedItem }) }},
	{CheckLeftovers, "parked", "a parked event", func(s *Snapshot) { plantLeftovers(s, "payment", func(l *Leftovers) { l.Parked = plantedItem }) }},
	{CheckLeftovers, "gap", "an open ordering gap", func(s *Snapshot) { plantLeftovers(s, "inventory", func(l *Leftovers) { l.Gaps = plantedItem }) }},
	{CheckLeftovers, "needs-attention", "a charge parked as needs_attention", func(s *Snapshot) {
		plantLeftovers(s, "payment", func(l *Leftovers) { l.NeedsAttention = plantedItem })
	}},
	{CheckLeftovers, "payment-pending", "a declined order's payment still pending", func(s *Snapshot) {
		plantOrder(s, "5", func(o *Order) { o.Payment.Status = "pending"; o.Charges = []Charge{} })
	}},
	{CheckLeftovers, "refund-pending", "a refund still pending", func(s *Snapshot) {
		plantOrder(s, "6", func(o *Order) { o.RefundStatus = "pending" })
	}},
	{CheckLeftovers, "broker", "a retry stranded in its tier", func(s *Snapshot) {
		s.Broker = map[string]int{"inventory.order-events.delay.0": 12}
	}},
	{CheckLeftovers, "rest", "the system never came to rest", func(s *Snapshot) {
		s.Rest = Rest{After: 2 * time.Minute, Waiting: "1 orders to finish"}
	}},
	{CheckDoubleEffect, "history-event", "one event applied twice", func(s *Snapshot) {
		plantOrder(s, "6", func(o *Order) { o.History = append(o.History, o.History[len(o.History)-1]) })
	}},
	{CheckDoubleEffect, "outbox-event", "order.confirmed written twice", func(s *Snapshot) {
		plantOrder(s, "1", func(o *Order) {
			o.Outbox = append(o.Outbox, Event{Service: "order", EventID: "again", Type: "order.confirmed", Version: 3})
		})
	}},
	{CheckDoubleEffect, "status-regression", "a rejected order moved on", func(s *Snapshot) {
		plantOrder(s, "2", func(o *Order) {
			o.History = append(o.History, Change{From: statusRejected, To: statusAwaitingPayment, Trigger: "inventory_reserved", Actor: "consumer"})
		})
	}},
	{CheckAnswers, "5xx", "a create answered 500", func(s *Snapshot) {
		plantRequest(s, "happy", func(r *Request) { r.Creates = append([]Answer{{Status: 500, Error: "internal error"}}, r.Creates...) })
	}},
	{CheckAnswers, "unexpected", "a cancel answered 404", func(s *Snapshot) {
		plantRequest(s, "cancel", func(r *Request) { r.Cancels = append(r.Cancels, Answer{Status: 404}) })
	}},
	{CheckAnswers, "no-answer", "a create never answered", func(s *Snapshot) {
		plantRequest(s, "happy", func(r *Request) { r.Creates = []Answer{{Error: "connection refused"}, {Error: "timeout"}} })
	}},
	{CheckFaults, "restart", "payment exited and was started again, no fault killed it", func(s *Snapshot) { s.Processes["payment"] = 2 }},
	{CheckFaults, "copy-take", "payment-psp's copies went to two takes", func(s *Snapshot) {
		plantFault(s, FaultCopyTake, func(f *FaultRecord) { f.CopyTakes[2].Seen = false })
	}},
	{CheckFaults, "retry-in-flight", "a node kill found no retry waiting", func(s *Snapshot) {
		plantFault(s, FaultNodeKill, func(f *FaultRecord) { f.Retry.Waiting = 0 })
	}},
	{CheckFaults, "give-up", "a delivery that gave up in the outage was lost", func(s *Snapshot) {
		plantFault(s, FaultDBOutage, func(f *FaultRecord) { f.Outage.GaveUp[0].Settled = "" })
	}},
}

// plantOrder changes one order of the sample.
func plantOrder(s *Snapshot, id string, f func(*Order)) {
	o := s.Orders[id]
	f(&o)
	s.Orders[id] = o
}

// plantRequest changes the sample's request of that key.
func plantRequest(s *Snapshot, key string, f func(*Request)) {
	for i := range s.Requests {
		if s.Requests[i].Key == key {
			f(&s.Requests[i])
		}
	}
}

// plantStock changes one SKU's stock at the end.
func plantStock(s *Snapshot, sku string, f func(*Stock)) {
	st := s.StockEnd[sku]
	f(&st)
	s.StockEnd[sku] = st
}

// plantLeftovers changes what one service holds at rest.
func plantLeftovers(s *Snapshot, svc string, f func(*Leftovers)) {
	l := s.Services[svc]
	f(&l)
	s.Services[svc] = l
}

// plantedItem is a leftover that a clean run never has.
var plantedItem = []Item{{ID: "x 1", Detail: "planted"}}

// plantFault changes the sample's fault of that kind.
func plantFault(s *Snapshot, k FaultKind, f func(*FaultRecord)) {
	for i := range s.Faults {
		if s.Faults[i].Kind == k {
			f(&s.Faults[i])
		}
	}
}
