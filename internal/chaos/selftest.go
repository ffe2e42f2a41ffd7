package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"
)

// SampleSnapshot is a small consistent world, as a clean run would leave
// it: one order of each kind, every record agreeing, stock conserved. The
// selftest and the unit tests plant violations into copies of it.
func SampleSnapshot() Snapshot {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	created := func(ms int) Change {
		return Change{To: statusPendingInventory, Trigger: "created", Actor: "api", At: at(ms)}
	}
	move := func(from, to, trigger, event string, ms int) Change {
		return Change{From: from, To: to, Trigger: trigger, Actor: "consumer", EventID: event, At: at(ms)}
	}
	ev := func(svc, typ string, v uint64) Event {
		return Event{Service: svc, EventID: fmt.Sprintf("%s-%s-%d", svc, typ, v), Type: typ, Version: v, Status: "sent", Attempts: 1}
	}
	confirmedRecords := func(o Order, items []Line, id string) Order {
		o.Status, o.RefundStatus = statusConfirmed, "none"
		o.Reservation = &Reservation{Status: "committed", Items: items}
		o.Payment = &Payment{Status: "succeeded", AmountCents: o.TotalCents}
		o.Charges = []Charge{{ChargeID: "ch_" + id, Status: "succeeded", AmountCents: o.TotalCents}}
		o.History = []Change{created(0), move(statusPendingInventory, statusAwaitingPayment, "inventory_reserved", "e-res-"+id, 20),
			move(statusAwaitingPayment, statusConfirmed, "payment_succeeded", "e-pay-"+id, 40)}
		o.Outbox = []Event{ev("order", "order.created", 1), ev("inventory", "inventory.reserved", 1),
			ev("payment", "payment.charge-requested", 1), ev("payment", "payment.succeeded", 2), ev("order", "order.confirmed", 2)}
		return o
	}
	sent := func(id string, total int64) []Answer {
		return []Answer{{At: time.Second, Status: 202, OrderID: id, Total: total}}
	}
	s := Snapshot{
		Orders:       map[string]Order{},
		StockStart:   map[string]Stock{"SKU-1": {OnHand: 100, Available: 100}, "SKU-2": {OnHand: 500, Available: 500}, ScarceSKU: {OnHand: 1, Available: 1}, SoldOutSKU: {}},
		Receipts:     map[string]int{},
		MinAvailable: map[string]int{"SKU-1": 95, "SKU-2": 497, ScarceSKU: 0, SoldOutSKU: 0},
		Services: map[string]Leftovers{"order": {Outbox: map[string]int64{}}, "inventory": {Outbox: map[string]int64{}},
			"payment": {Outbox: map[string]int64{}}},
		Rest: Rest{Reached: true, After: 3 * time.Second},
	}
	add := func(r Request, o Order) {
		r.Customer, o.Customer = "chaos-t-"+r.Key, "chaos-t-"+r.Key
		if r.Kind == KindDecline {
			r.Customer, o.Customer = "decline-"+r.Customer, "decline-"+o.Customer
		}
		if r.Creates == nil {
			r.Creates = sent(o.ID, o.TotalCents)
		}
		r.Sent = t0
		s.Requests = append(s.Requests, r)
		s.Orders[o.ID] = o
	}
	oneSKU1 := []Line{{SKU: "SKU-1", Quantity: 1}}

	happyItems := []Line{{SKU: "SKU-1", Quantity: 2}}
	add(Request{Key: "happy", Kind: KindHappy, Items: happyItems}, confirmedRecords(Order{ID: "1", TotalCents: 17800}, happyItems, "1"))

	add(Request{Key: "insufficient", Kind: KindInsufficient, Items: []Line{{SKU: SoldOutSKU, Quantity: 1}, {SKU: "SKU-1", Quantity: 1}}},
		Order{ID: "2", Status: statusRejected, RefundStatus: "none", TotalCents: 10400,
			Reservation: &Reservation{Status: "rejected"}, Charges: []Charge{},
			History: []Change{created(0), move(statusPendingInventory, statusRejected, "inventory_rejected", "e-rej-2", 20)},
			Outbox:  []Event{ev("order", "order.created", 1), ev("inventory", "inventory.rejected", 1)}})

	scarce := []Line{{SKU: ScarceSKU, Quantity: 1}}
	add(Request{Key: "scarce-won", Kind: KindScarce, Items: scarce}, confirmedRecords(Order{ID: "3", TotalCents: 5000}, scarce, "3"))
	add(Request{Key: "scarce-lost", Kind: KindScarce, Items: scarce},
		Order{ID: "4", Status: statusRejected, RefundStatus: "none", TotalCents: 5000,
			Reservation: &Reservation{Status: "rejected"}, Charges: []Charge{},
			History: []Change{created(0), move(statusPendingInventory, statusRejected, "inventory_rejected", "e-rej-4", 20)},
			Outbox:  []Event{ev("order", "order.created", 1), ev("inventory", "inventory.rejected", 1)}})

	add(Request{Key: "decline", Kind: KindDecline, Items: oneSKU1},
		Order{ID: "5", Status: statusCancelled, StatusReason: "payment failed: card_declined", RefundStatus: "none", TotalCents: 8900,
			Reservation: &Reservation{Status: "released", Items: oneSKU1},
			Payment:     &Payment{Status: "failed", AmountCents: 8900},
			Charges:     []Charge{{ChargeID: "ch_5", Status: "declined", AmountCents: 8900}},
			History: []Change{created(0), move(statusPendingInventory, statusAwaitingPayment, "inventory_reserved", "e-res-5", 20),
				move(statusAwaitingPayment, statusCancelled, "payment_failed", "e-pay-5", 40)},
			Outbox: []Event{ev("order", "order.created", 1), ev("inventory", "inventory.reserved", 1), ev("payment", "payment.charge-requested", 1),
				ev("payment", "payment.failed", 2), ev("order", "order.cancelled", 2), ev("inventory", "inventory.released", 2)}})

	cancelled := confirmedRecords(Order{ID: "6", TotalCents: 8900}, oneSKU1, "6")
	cancelled.Status, cancelled.RefundStatus, cancelled.StatusReason = statusCancelled, "refunded", "cancelled by the customer"
	cancelled.Reservation.Status = "restocked"
	cancelled.Payment = &Payment{Status: "refunded", AmountCents: 8900, RefundStatus: "succeeded"}
	cancelled.Charges[0].RefundedCents = 8900
	cancelled.History = append(cancelled.History, Change{From: statusConfirmed, To: statusCancelled, Trigger: "cancel_requested", Actor: "api", At: at(900)},
		move(statusCancelled, statusCancelled, "payment_refunded", "e-refund-6", 950))
	cancelled.Outbox = append(cancelled.Outbox, ev("order", "order.cancelled", 3), ev("payment", "payment.refund-requested", 3),
		ev("payment", "payment.refunded", 4))
	add(Request{Key: "cancel", Kind: KindCancel, Items: oneSKU1,
		Cancels: []Answer{{At: 2 * time.Second, Status: 202, OrderID: "6", Result: "cancelled"}}}, cancelled)

	twoSKU2 := []Line{{SKU: "SKU-2", Quantity: 1}}
	add(Request{Key: "replay", Kind: KindReplay, Items: twoSKU2, Creates: []Answer{
		{At: time.Second, Status: 202, OrderID: "7", Total: 1200},
		{At: time.Second, Status: 202, OrderID: "7", Total: 1200, Replayed: true},
		{At: time.Second, Status: 202, OrderID: "7", Total: 1200, Replayed: true},
		{At: 3 * time.Second, Status: 202, OrderID: "7", Total: 1200, Replayed: true}}},
		confirmedRecords(Order{ID: "7", TotalCents: 1200}, twoSKU2, "7"))
	add(Request{Key: "conflict", Kind: KindConflict, Items: twoSKU2,
		Conflicts: []Answer{{At: 2 * time.Second, Status: 422, Error: "idempotency key already used for a different request"}}},
		confirmedRecords(Order{ID: "8", TotalCents: 1200}, twoSKU2, "8"))

	// Sold: order 1 (2 x SKU-1), 3 (the scarce unit), 7 and 8 (SKU-2);
	// order 6 was sold and restocked.
	s.StockEnd = map[string]Stock{"SKU-1": {OnHand: 98, Available: 98}, "SKU-2": {OnHand: 498, Available: 498},
		ScarceSKU: {OnHand: 0, Available: 0}, SoldOutSKU: {}}
	s.Faults, s.Processes = sampleFaults()
	return s
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

// Plant is one violation put into a copy of the sample snapshot.
type Plant struct {
	Check, Rule string
	What        string
	Apply       func(*Snapshot)
}

// Plants returns one planted violation for every rule of every check.
func Plants() []Plant {
	order := func(s *Snapshot, id string, f func(*Order)) {
		o := s.Orders[id]
		f(&o)
		s.Orders[id] = o
	}
	req := func(s *Snapshot, key string, f func(*Request)) {
		for i := range s.Requests {
			if s.Requests[i].Key == key {
				f(&s.Requests[i])
			}
		}
	}
	stock := func(s *Snapshot, sku string, f func(*Stock)) {
		st := s.StockEnd[sku]
		f(&st)
		s.StockEnd[sku] = st
	}
	left := func(s *Snapshot, svc string, f func(*Leftovers)) {
		l := s.Services[svc]
		f(&l)
		s.Services[svc] = l
	}
	item := []Item{{ID: "x 1", Detail: "planted"}}
	return []Plant{
		{CheckOutcome, "missing", "an accepted order is gone", func(s *Snapshot) { delete(s.Orders, "1") }},
		{CheckOutcome, "not-terminal", "an order stuck in awaiting_payment", func(s *Snapshot) {
			order(s, "7", func(o *Order) { o.Status = statusAwaitingPayment })
		}},
		{CheckOutcome, "unexpected", "a plentiful order ends rejected", func(s *Snapshot) {
			req(s, "scarce-lost", func(r *Request) { r.Kind = KindHappy })
		}},
		{CheckOutcome, "total", "the total changed after the answer", func(s *Snapshot) {
			req(s, "happy", func(r *Request) { r.Creates[0].Total = 17000 })
		}},
		{CheckIdempotency, "split", "a replay answered with another order id", func(s *Snapshot) {
			req(s, "replay", func(r *Request) { r.Creates[2].OrderID = "9" })
		}},
		{CheckIdempotency, "duplicate", "a second order stored for one key", func(s *Snapshot) {
			dup := s.Orders["7"]
			dup.ID = "9"
			s.Orders["9"] = dup
		}},
		{CheckIdempotency, "created-twice", "two answers created the order", func(s *Snapshot) {
			req(s, "replay", func(r *Request) { r.Creates[3].Replayed = false })
		}},
		{CheckIdempotency, "conflict-accepted", "another body accepted under the same key", func(s *Snapshot) {
			req(s, "conflict", func(r *Request) { r.Conflicts[0] = Answer{Status: 202, OrderID: "8"} })
		}},
		{CheckStock, "on-hand", "one unit of SKU-1 vanished", func(s *Snapshot) {
			stock(s, "SKU-1", func(st *Stock) { st.OnHand--; st.Available-- })
		}},
		{CheckStock, "reserved", "a unit of SKU-2 still reserved", func(s *Snapshot) {
			stock(s, "SKU-2", func(st *Stock) { st.Reserved++; st.Available-- })
		}},
		{CheckStock, "negative", "available went below zero while running", func(s *Snapshot) { s.MinAvailable[ScarceSKU] = -1 }},
		{CheckStock, "undersold", "a scarce order rejected while a unit stayed on the shelf", func(s *Snapshot) {
			s.Receipts[ScarceSKU] = 1 // a second unit came, and no order took it
			stock(s, ScarceSKU, func(st *Stock) { st.OnHand, st.Available = 1, 1 })
		}},
		{CheckPSP, "charges", "a confirmed order charged twice", func(s *Snapshot) {
			order(s, "1", func(o *Order) {
				o.Charges = append(o.Charges, Charge{ChargeID: "ch_1b", Status: "succeeded", AmountCents: o.TotalCents})
			})
		}},
		{CheckPSP, "amount", "a charge of the wrong amount", func(s *Snapshot) {
			order(s, "7", func(o *Order) { o.Charges[0].AmountCents = 1100 })
		}},
		{CheckPSP, "not-refunded", "a cancelled order's charge half refunded", func(s *Snapshot) {
			order(s, "6", func(o *Order) { o.Charges[0].RefundedCents = 4000 })
		}},
		{CheckPSP, "payment-record", "a rejected order has a payment", func(s *Snapshot) {
			order(s, "2", func(o *Order) { o.Payment = &Payment{Status: "failed", AmountCents: o.TotalCents} })
		}},
		{CheckReservation, "missing", "inventory has no record of a rejected order", func(s *Snapshot) {
			order(s, "2", func(o *Order) { o.Reservation = nil })
		}},
		{CheckReservation, "mismatch", "a cancelled order's stock still reserved", func(s *Snapshot) {
			order(s, "5", func(o *Order) { o.Reservation.Status = "reserved" })
		}},
		{CheckReservation, "items", "a committed reservation holds other quantities", func(s *Snapshot) {
			order(s, "1", func(o *Order) { o.Reservation.Items = []Line{{SKU: "SKU-1", Quantity: 1}} })
		}},
		{CheckLeftovers, "outbox", "an outbox row still pending", func(s *Snapshot) {
			left(s, "order", func(l *Leftovers) { l.Outbox["pending"] = 1 })
		}},
		{CheckLeftovers, "dead-letter", "a dead letter", func(s *Snapshot) { left(s, "inventory", func(l *Leftovers) { l.DeadLetters = item }) }},
		{CheckLeftovers, "parked", "a parked event", func(s *Snapshot) { left(s, "payment", func(l *Leftovers) { l.Parked = item }) }},
		{CheckLeftovers, "gap", "an open ordering gap", func(s *Snapshot) { left(s, "inventory", func(l *Leftovers) { l.Gaps = item }) }},
		{CheckLeftovers, "needs-attention", "a charge parked as needs_attention", func(s *Snapshot) {
			left(s, "payment", func(l *Leftovers) { l.NeedsAttention = item })
		}},
		{CheckLeftovers, "payment-pending", "a declined order's payment still pending", func(s *Snapshot) {
			order(s, "5", func(o *Order) { o.Payment.Status = "pending"; o.Charges = []Charge{} })
		}},
		{CheckLeftovers, "refund-pending", "a refund still pending", func(s *Snapshot) {
			order(s, "6", func(o *Order) { o.RefundStatus = "pending" })
		}},
		{CheckLeftovers, "broker", "a retry stranded in its tier", func(s *Snapshot) {
			s.Broker = map[string]int{"inventory.order-events.delay.0": 12}
		}},
		{CheckLeftovers, "rest", "the system never came to rest", func(s *Snapshot) {
			s.Rest = Rest{After: 2 * time.Minute, Waiting: "1 orders to finish"}
		}},
		{CheckDoubleEffect, "history-event", "one event applied twice", func(s *Snapshot) {
			order(s, "6", func(o *Order) { o.History = append(o.History, o.History[len(o.History)-1]) })
		}},
		{CheckDoubleEffect, "outbox-event", "order.confirmed written twice", func(s *Snapshot) {
			order(s, "1", func(o *Order) {
				o.Outbox = append(o.Outbox, Event{Service: "order", EventID: "again", Type: "order.confirmed", Version: 3})
			})
		}},
		{CheckDoubleEffect, "status-regression", "a rejected order moved on", func(s *Snapshot) {
			order(s, "2", func(o *Order) {
				o.History = append(o.History, Change{From: statusRejected, To: statusAwaitingPayment, Trigger: "inventory_reserved", Actor: "consumer"})
			})
		}},
		{CheckAnswers, "5xx", "a create answered 500", func(s *Snapshot) {
			req(s, "happy", func(r *Request) { r.Creates = append([]Answer{{Status: 500, Error: "internal error"}}, r.Creates...) })
		}},
		{CheckAnswers, "unexpected", "a cancel answered 404", func(s *Snapshot) {
			req(s, "cancel", func(r *Request) { r.Cancels = append(r.Cancels, Answer{Status: 404}) })
		}},
		{CheckAnswers, "no-answer", "a create never answered", func(s *Snapshot) {
			req(s, "happy", func(r *Request) { r.Creates = []Answer{{Error: "connection refused"}, {Error: "timeout"}} })
		}},
		{CheckFaults, "restart", "payment exited and was started again, no fault killed it", func(s *Snapshot) { s.Processes["payment"] = 2 }},
		{CheckFaults, "copy-take", "payment-psp's copies went to two takes", func(s *Snapshot) {
			fault(s, FaultCopyTake, func(f *FaultRecord) { f.CopyTakes[2].Seen = false })
		}},
		{CheckFaults, "retry-in-flight", "a node kill found no retry waiting", func(s *Snapshot) {
			fault(s, FaultNodeKill, func(f *FaultRecord) { f.Retry.Waiting = 0 })
		}},
		{CheckFaults, "give-up", "a delivery that gave up in the outage was lost", func(s *Snapshot) {
			fault(s, FaultDBOutage, func(f *FaultRecord) { f.Outage.GaveUp[0].Settled = "" })
		}},
	}
}

// fault changes the sample's fault of that kind.
func fault(s *Snapshot, k FaultKind, f func(*FaultRecord)) {
	for i := range s.Faults {
		if s.Faults[i].Kind == k {
			f(&s.Faults[i])
		}
	}
}

// PlantResult is what the checker found for one planted violation.
type PlantResult struct {
	Plant
	Caught   bool        // the planted rule was reported
	Reported []Violation // everything reported
}

// SelfTest checks the sample snapshot (it must be clean) and every planted
// violation (each must be caught by its rule). It returns the results and
// whether all of it held.
func SelfTest() (clean []Violation, results []PlantResult, ok bool) {
	clean = Check(SampleSnapshot())
	ok = len(clean) == 0
	for _, p := range Plants() {
		s := copySnapshot(SampleSnapshot())
		p.Apply(&s)
		got := Check(s)
		caught := slices.ContainsFunc(got, func(v Violation) bool { return v.Check == p.Check && v.Rule == p.Rule })
		ok = ok && caught
		results = append(results, PlantResult{Plant: p, Caught: caught, Reported: got})
	}
	return clean, results, ok
}

func copySnapshot(s Snapshot) Snapshot {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	var out Snapshot
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// PrintSelfTest writes the selftest's table.
func PrintSelfTest(w io.Writer, clean []Violation, results []PlantResult, ok bool) {
	fmt.Fprintf(w, "selftest: the checker against a consistent sample snapshot with one violation planted per rule\n\n")
	if len(clean) == 0 {
		fmt.Fprintln(w, "  sample snapshot: clean")
	} else {
		fmt.Fprintf(w, "  sample snapshot: NOT CLEAN (%d violations)\n", len(clean))
		for _, v := range clean {
			fmt.Fprintf(w, "    %s\n", v)
		}
	}
	for _, r := range results {
		mark := "caught"
		if !r.Caught {
			mark = "MISSED"
		}
		var also []string
		for _, v := range r.Reported {
			if v.Check != r.Check || v.Rule != r.Rule {
				also = append(also, v.Check+"/"+v.Rule)
			}
		}
		extra := ""
		if len(also) > 0 {
			extra = " (also: " + joinUnique(also) + ")"
		}
		fmt.Fprintf(w, "  %-6s %-32s %s%s\n", mark, r.Check+"/"+r.Rule, r.What, extra)
	}
	if ok {
		fmt.Fprintf(w, "\nselftest PASS: %d planted violations, every one caught\n", len(results))
	} else {
		fmt.Fprintln(w, "\nselftest FAIL")
	}
}

func joinUnique(list []string) string {
	slices.Sort(list)
	list = slices.Compact(list)
	out := ""
	for i, s := range list {
		if i > 0 {
			out += ", "
		}
		out += s
	}
	return out
}
