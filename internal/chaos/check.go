package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Violation is one broken rule, found in a snapshot.
type Violation struct {
	// Check is the group, one of Checks: the consistency report's rows.
	Check string `json:"check"`
	// Rule is the precise rule within the group (Rules lists them).
	Rule    string `json:"rule"`
	Subject string `json:"subject"` // "order 42", "key chaos-…", "SKU-1", "service inventory"
	Detail  string `json:"detail"`
}

func (v Violation) String() string {
	return fmt.Sprintf("%s/%s %s: %s", v.Check, v.Rule, v.Subject, v.Detail)
}

// The checks, as the consistency report lists them.
const (
	CheckOutcome      = "outcome"       // every accepted order exists and is terminal, as its request implies
	CheckIdempotency  = "idempotency"   // one order per key, replays return the same id, another body gets 422
	CheckStock        = "stock"         // on hand = start + receipts - confirmed; reserved back to its start; available never negative
	CheckPSP          = "psp"           // the PSP's books and the payment record agree with the outcome
	CheckReservation  = "reservation"   // inventory's reservation agrees with the outcome
	CheckLeftovers    = "leftovers"     // nothing pending, failed, dead, parked or needing attention; rest reached
	CheckDoubleEffect = "double-effect" // one history row per event, one outbox event per order and type, no regression
	CheckAnswers      = "answers"       // what clients were answered: no 5xx, nothing unexpected, every request settled
)

// Checks lists the checks in report order, each with what it asserts.
var Checks = []struct{ Name, Asserts string }{
	{CheckOutcome, "every accepted order exists and is terminal, as its request implies"},
	{CheckIdempotency, "one order per key; replays return the same id; the same key with another body gets 422"},
	{CheckStock, "on hand = start + receipts - confirmed, per SKU; reserved back to its start; available never negative"},
	{CheckPSP, "confirmed: one succeeded charge of the total; rejected: none; cancelled: none, declined or fully refunded; payment record agrees"},
	{CheckReservation, "confirmed: committed; rejected: rejected; cancelled: released, restocked or never held; items as ordered"},
	{CheckLeftovers, "no outbox row pending, sending or failed, no dead letter, parked event, open gap, needs_attention, pending payment or refund, message held on the broker; rest reached"},
	{CheckDoubleEffect, "one history row per consumed event, one outbox event per order and type, no status regression"},
	{CheckAnswers, "no 5xx answer, no unexpected status, every request settled by a definite answer"},
	{CheckFaults, "every fault reached its path (copies in one take, a retry in flight, deliveries past their budget, none lost); no process exited unkilled"},
}

// Rules lists every rule Check can report, by check; the selftest plants
// one violation of each.
var Rules = map[string][]string{
	CheckOutcome:      {"missing", "not-terminal", "unexpected", "total"},
	CheckIdempotency:  {"split", "duplicate", "created-twice", "conflict-accepted"},
	CheckStock:        {"on-hand", "reserved", "negative", "undersold"},
	CheckPSP:          {"charges", "amount", "not-refunded", "payment-record"},
	CheckReservation:  {"missing", "mismatch", "items"},
	CheckLeftovers:    {"outbox", "dead-letter", "parked", "gap", "needs-attention", "payment-pending", "refund-pending", "rest", "broker"},
	CheckDoubleEffect: {"history-event", "outbox-event", "status-regression"},
	CheckAnswers:      {"5xx", "unexpected", "no-answer"},
	CheckFaults:       {"restart", "copy-take", "retry-in-flight", "give-up"},
}

// Order statuses (the order service's contract).
const (
	statusPendingInventory = "pending_inventory"
	statusAwaitingPayment  = "awaiting_payment"
	statusConfirmed        = "confirmed"
	statusRejected         = "rejected"
	statusCancelled        = "cancelled"
)

func terminal(status string) bool {
	return status == statusConfirmed || status == statusRejected || status == statusCancelled
}

// legalMoves is the order's transition table as its history may show it
// (docs/contract.md): rejected and cancelled are final (a cancelled order
// may still record refund changes, cancelled -> cancelled); confirmed moves
// only to cancelled (a cancel after confirm is a new business transaction).
var legalMoves = map[string][]string{
	"":                     {statusPendingInventory},
	statusPendingInventory: {statusAwaitingPayment, statusConfirmed, statusRejected, statusCancelled},
	statusAwaitingPayment:  {statusConfirmed, statusCancelled},
	statusConfirmed:        {statusCancelled},
	statusCancelled:        {statusCancelled},
}

// repeatable are the event types one service may write more than once for
// one order, each with a new aggregate version: the payment sweep requests
// a charge or a refund again, with the same PSP key, when the PSP has no
// record of it.
var repeatable = map[string]bool{"payment.charge-requested": true, "payment.refund-requested": true}

// Check returns every violation in the snapshot, sorted by check, rule and
// subject. It reads nothing but s.
func Check(s Snapshot) []Violation {
	c := &checker{s: s, byCustomer: map[string][]Order{}}
	for _, o := range s.Orders {
		c.byCustomer[o.Customer] = append(c.byCustomer[o.Customer], o)
	}
	for _, r := range s.Requests {
		c.request(r)
	}
	c.stock()
	c.leftovers()
	c.faults()
	slices.SortStableFunc(c.out, func(a, b Violation) int {
		return cmp.Or(cmp.Compare(checkIndex(a.Check), checkIndex(b.Check)), cmp.Compare(a.Rule, b.Rule), compareSubjects(a.Subject, b.Subject))
	})
	return c.out
}

// compareSubjects orders "order 9" before "order 10".
func compareSubjects(a, b string) int {
	pa, na, oka := splitNumber(a)
	pb, nb, okb := splitNumber(b)
	if oka && okb && pa == pb {
		return cmp.Compare(na, nb)
	}
	return cmp.Compare(a, b)
}

func splitNumber(s string) (string, uint64, bool) {
	i := strings.LastIndexByte(s, ' ')
	n, err := strconv.ParseUint(s[i+1:], 10, 64)
	return s[:i+1], n, err == nil
}

func checkIndex(name string) int {
	for i, c := range Checks {
		if c.Name == name {
			return i
		}
	}
	return len(Checks)
}

type checker struct {
	s          Snapshot
	byCustomer map[string][]Order
	out        []Violation
}

func (c *checker) add(check, rule, subject, format string, args ...any) {
	c.out = append(c.out, Violation{Check: check, Rule: rule, Subject: subject, Detail: fmt.Sprintf(format, args...)})
}

// request checks one key: its answers, its order, and the order's records
// in every service.
func (c *checker) request(r Request) {
	subject := "key " + r.Key
	c.answers(r, subject)

	ids := r.OrderIDs()
	if len(ids) > 1 {
		c.add(CheckIdempotency, "split", subject, "the create answers named %d orders: %s", len(ids), strings.Join(ids, ", "))
	}
	created := 0
	for _, a := range r.Creates {
		if a.Status/100 == 2 && !a.Replayed {
			created++
		}
	}
	if created > 1 {
		c.add(CheckIdempotency, "created-twice", subject, "%d create answers were not marked Idempotent-Replayed", created)
	}
	var stored []string
	for _, o := range c.byCustomer[r.Customer] {
		stored = append(stored, o.ID)
	}
	sort.Strings(stored)
	if len(stored) > 1 || (len(stored) == 1 && len(ids) > 0 && !contains(ids, stored[0])) || (len(stored) == 1 && len(ids) == 0) {
		c.add(CheckIdempotency, "duplicate", subject, "orders stored for this key: %s; answered: %s",
			strings.Join(stored, ", "), orNone(strings.Join(ids, ", ")))
	}
	if len(ids) == 0 {
		return
	}
	o, ok := c.s.Orders[ids[0]]
	if !ok {
		c.add(CheckOutcome, "missing", "order "+ids[0], "accepted for key %s (%s) but not found", r.Key, r.Kind)
		return
	}
	c.order(r, o)
}

func suffix(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func (c *checker) answers(r Request, subject string) {
	settled := func(as []Answer) bool {
		for _, a := range as {
			if a.Definite() {
				return true
			}
		}
		return len(as) == 0
	}
	for _, group := range []struct {
		what string
		as   []Answer
		ok   func(Answer) bool
	}{
		{"create", r.Creates, func(a Answer) bool { return a.Status == 202 }},
		{"conflicting create", r.Conflicts, func(a Answer) bool { return a.Status == 422 || a.Status/100 == 2 }},
		{"cancel", r.Cancels, func(a Answer) bool { return a.Status == 202 || a.Status == 200 }},
	} {
		for _, a := range group.as {
			switch {
			case a.Status >= 500:
				c.add(CheckAnswers, "5xx", subject, "%s sent at +%s answered %d%s", group.what, round(a.At), a.Status, suffix(a.Error))
			case a.Definite() && !group.ok(a):
				c.add(CheckAnswers, "unexpected", subject, "%s sent at +%s answered %d%s", group.what, round(a.At), a.Status, suffix(a.Error))
			}
		}
		if !settled(group.as) {
			last := group.as[len(group.as)-1]
			c.add(CheckAnswers, "no-answer", subject, "%s never got a definite answer in %d tries (last: %d %s)",
				group.what, len(group.as), last.Status, last.Error)
		}
	}
	for _, a := range r.Conflicts {
		if a.Status/100 == 2 {
			c.add(CheckIdempotency, "conflict-accepted", subject, "the same key with another body was answered %d (order %s), not 422", a.Status, a.OrderID)
		}
	}
}

// expected returns the statuses the request allows its order to end in.
func expected(r Request) []string {
	switch r.Kind {
	case KindInsufficient:
		return []string{statusRejected}
	case KindScarce:
		return []string{statusConfirmed, statusRejected}
	case KindDecline:
		return []string{statusCancelled}
	case KindCancel:
		for _, a := range r.Cancels {
			switch a.Result {
			case "cancelled", "already_cancelled":
				return []string{statusCancelled}
			case "already_rejected":
				return []string{statusRejected}
			}
		}
		return []string{statusConfirmed, statusRejected, statusCancelled} // the cancel was never answered
	}
	return []string{statusConfirmed}
}

func (c *checker) order(r Request, o Order) {
	subject := "order " + o.ID
	if !terminal(o.Status) {
		c.add(CheckOutcome, "not-terminal", subject, "%s order still %s at rest", r.Kind, o.Status)
	} else if want := expected(r); !contains(want, o.Status) {
		c.add(CheckOutcome, "unexpected", subject, "%s order ended %s (%s), want %s", r.Kind, o.Status, o.StatusReason, strings.Join(want, " or "))
	}
	for _, a := range r.Creates {
		if a.Status/100 == 2 && a.Total != 0 && a.Total != o.TotalCents {
			c.add(CheckOutcome, "total", subject, "total %d at rest, %d when accepted", o.TotalCents, a.Total)
			break
		}
	}
	c.psp(o, subject)
	c.reservation(r, o, subject)
	c.history(o, subject)
	c.outbox(o, subject)
}

func (c *checker) psp(o Order, subject string) {
	succeeded := 0
	for _, ch := range o.Charges {
		if ch.Status == "succeeded" {
			succeeded++
		}
	}
	switch o.Status {
	case statusConfirmed:
		if len(o.Charges) != 1 || succeeded != 1 {
			c.add(CheckPSP, "charges", subject, "confirmed with %s, want exactly one succeeded charge", describeCharges(o.Charges))
		}
		for _, ch := range o.Charges {
			if ch.Status == "succeeded" && ch.AmountCents != o.TotalCents {
				c.add(CheckPSP, "amount", subject, "charge %s of %d for an order of %d", ch.ChargeID, ch.AmountCents, o.TotalCents)
			}
			if ch.RefundedCents != 0 {
				c.add(CheckPSP, "not-refunded", subject, "confirmed, but %d of charge %s refunded", ch.RefundedCents, ch.ChargeID)
			}
		}
		if p := o.Payment; p == nil || p.Status != "succeeded" || p.AmountCents != o.TotalCents {
			c.add(CheckPSP, "payment-record", subject, "confirmed for %d, payment record %s", o.TotalCents, describePayment(p))
		}
		if o.RefundStatus != "none" {
			c.add(CheckOutcome, "unexpected", subject, "confirmed with refund_status %s", o.RefundStatus)
		}
	case statusRejected:
		if len(o.Charges) > 0 {
			c.add(CheckPSP, "charges", subject, "rejected with %s, want none", describeCharges(o.Charges))
		}
		if o.Payment != nil {
			c.add(CheckPSP, "payment-record", subject, "rejected, payment record %s, want none", describePayment(o.Payment))
		}
	case statusCancelled:
		if len(o.Charges) > 1 || succeeded > 1 {
			c.add(CheckPSP, "charges", subject, "cancelled with %s, want at most one", describeCharges(o.Charges))
		}
		charged := false
		for _, ch := range o.Charges {
			if ch.Status != "succeeded" {
				continue
			}
			charged = true
			if ch.AmountCents != o.TotalCents {
				c.add(CheckPSP, "amount", subject, "charge %s of %d for an order of %d", ch.ChargeID, ch.AmountCents, o.TotalCents)
			}
			if ch.RefundedCents != ch.AmountCents {
				c.add(CheckPSP, "not-refunded", subject, "cancelled, charge %s of %d refunded %d", ch.ChargeID, ch.AmountCents, ch.RefundedCents)
			}
		}
		p := o.Payment
		switch {
		case p == nil, p.Status == "failed", p.Status == "refunded":
		case p.Status == "withdrawn", p.Status == "cancelled_before_charge":
			// Closed without a charge: withdrawn before the charge was
			// sent, or sent and found never made at the PSP.
			if charged {
				c.add(CheckPSP, "payment-record", subject, "cancelled, payment record %s although the PSP charged", describePayment(p))
			}
		case p.Status == "pending":
			c.add(CheckLeftovers, "payment-pending", subject, "cancelled, payment still pending (its charge was never settled)")
		case p.Status == "needs_attention":
			c.add(CheckLeftovers, "needs-attention", subject, "cancelled, payment parked as needs_attention")
		default:
			c.add(CheckPSP, "payment-record", subject, "cancelled, payment record %s", describePayment(p))
		}
		if p != nil && (p.RefundStatus == "requested" || p.RefundStatus == "pending") {
			c.add(CheckLeftovers, "refund-pending", subject, "refund still %s in the payment service", p.RefundStatus)
		}
		switch {
		case o.RefundStatus == "pending":
			c.add(CheckLeftovers, "refund-pending", subject, "cancelled, refund_status still pending at rest")
		case charged && o.RefundStatus != "refunded":
			c.add(CheckOutcome, "unexpected", subject, "cancelled after a charge with refund_status %s, want refunded", o.RefundStatus)
		case !charged && o.RefundStatus != "none":
			c.add(CheckOutcome, "unexpected", subject, "cancelled without a charge but refund_status %s", o.RefundStatus)
		}
	}
}

func describeCharges(chs []Charge) string {
	if len(chs) == 0 {
		return "no charge"
	}
	var parts []string
	for _, ch := range chs {
		parts = append(parts, fmt.Sprintf("%s %s %d", ch.ChargeID, ch.Status, ch.AmountCents))
	}
	return fmt.Sprintf("%d charges (%s)", len(chs), strings.Join(parts, "; "))
}

func describePayment(p *Payment) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprintf("%s %d", p.Status, p.AmountCents)
}

// reservationOK lists inventory's statuses each order outcome allows.
var reservationOK = map[string][]string{
	statusConfirmed: {"committed"},
	statusRejected:  {"rejected"},
	statusCancelled: {"released", "restocked", "cancelled_before_reserve", "commit_failed"},
}

func (c *checker) reservation(r Request, o Order, subject string) {
	want, ok := reservationOK[o.Status]
	if !ok {
		return // not terminal: reported already
	}
	res := o.Reservation
	if res == nil {
		c.add(CheckReservation, "missing", subject, "%s, but inventory has no reservation (want %s)", o.Status, strings.Join(want, " or "))
		return
	}
	if !contains(want, res.Status) {
		c.add(CheckReservation, "mismatch", subject, "%s, reservation %s (want %s)", o.Status, res.Status, strings.Join(want, " or "))
	}
	switch res.Status {
	case "committed", "released", "restocked":
		if !sameLines(res.Items, r.Items) {
			c.add(CheckReservation, "items", subject, "reservation holds %v, the order asked %v", res.Items, r.Items)
		}
	}
}

func sameLines(a, b []Line) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, l := range a {
		m[l.SKU] += l.Quantity
	}
	for _, l := range b {
		m[l.SKU] -= l.Quantity
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return true
}

func (c *checker) history(o Order, subject string) {
	seen := map[string]bool{}
	prev := ""
	for i, h := range o.History {
		if h.EventID != "" {
			if seen[h.EventID] {
				c.add(CheckDoubleEffect, "history-event", subject, "event %s changed the order twice (%s -> %s again)", h.EventID, h.From, h.To)
			}
			seen[h.EventID] = true
		}
		if h.From != prev {
			c.add(CheckDoubleEffect, "status-regression", subject, "history row %d moves from %q but the order was %q", i+1, h.From, prev)
		} else if !contains(legalMoves[h.From], h.To) {
			c.add(CheckDoubleEffect, "status-regression", subject, "history row %d moves %s -> %s (%s by %s)", i+1, orNone(h.From), h.To, h.Trigger, h.Actor)
		}
		prev = h.To
	}
	if len(o.History) > 0 && prev != o.Status {
		c.add(CheckDoubleEffect, "status-regression", subject, "the order is %s, its history ends at %s", o.Status, prev)
	}
}

func (c *checker) outbox(o Order, subject string) {
	type key struct{ service, typ string }
	byType := map[key][]Event{}
	for _, e := range o.Outbox {
		byType[key{e.Service, e.Type}] = append(byType[key{e.Service, e.Type}], e)
	}
	keys := make([]key, 0, len(byType))
	for k := range byType {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int { return cmp.Or(cmp.Compare(a.service, b.service), cmp.Compare(a.typ, b.typ)) })
	for _, k := range keys {
		evs := byType[k]
		versions := map[uint64]bool{}
		dup := false
		for _, e := range evs {
			dup = dup || versions[e.Version]
			versions[e.Version] = true
		}
		if dup || (len(evs) > 1 && !repeatable[k.typ]) {
			ids := make([]string, len(evs))
			for i, e := range evs {
				ids[i] = fmt.Sprintf("%s v%d", e.EventID, e.Version)
			}
			c.add(CheckDoubleEffect, "outbox-event", subject, "%s wrote %d %s events: %s", k.service, len(evs), k.typ, strings.Join(ids, ", "))
		}
	}
}

// stock checks conservation per SKU: what is on hand at the end is what
// was there, plus what was received, minus what orders that ended
// confirmed took.
func (c *checker) stock() {
	sold := map[string]int{}
	scarce := ""
	scarceRejected, scarceCancelled := 0, 0
	for _, r := range c.s.Requests {
		ids := r.OrderIDs()
		if len(ids) == 0 {
			continue
		}
		o, ok := c.s.Orders[ids[0]]
		if !ok {
			continue
		}
		if o.Status == statusConfirmed {
			for _, l := range r.Items {
				sold[l.SKU] += l.Quantity
			}
		}
		if r.Kind == KindScarce && len(r.Items) > 0 {
			scarce = r.Items[0].SKU
			switch o.Status {
			case statusRejected:
				scarceRejected++
			case statusCancelled:
				scarceCancelled++
			}
		}
	}
	skus := map[string]bool{}
	for sku := range c.s.StockStart {
		skus[sku] = true
	}
	for sku := range c.s.StockEnd {
		skus[sku] = true
	}
	for sku := range sold {
		skus[sku] = true
	}
	for _, sku := range sortedKeys(skus) {
		start, end := c.s.StockStart[sku], c.s.StockEnd[sku]
		want := start.OnHand + c.s.Receipts[sku] - sold[sku]
		if maybe := c.s.UncertainReceipts[sku]; end.OnHand < want || end.OnHand > want+maybe {
			c.add(CheckStock, "on-hand", sku, "on hand %d at rest, want %d (start %d + received %d - confirmed %d)%s",
				end.OnHand, want, start.OnHand, c.s.Receipts[sku], sold[sku], uncertainNote(maybe))
		}
		if end.Reserved != start.Reserved {
			c.add(CheckStock, "reserved", sku, "reserved %d at rest, %d at the start", end.Reserved, start.Reserved)
		}
		low, seen := c.s.MinAvailable[sku]
		if end.Available < low || !seen {
			low = end.Available
		}
		if low < 0 || end.Reserved > end.OnHand {
			c.add(CheckStock, "negative", sku, "available went down to %d (at rest: on hand %d, reserved %d)", low, end.OnHand, end.Reserved)
		}
	}
	if scarce != "" && scarceRejected > 0 && scarceCancelled == 0 && c.s.StockEnd[scarce].Available > 0 {
		c.add(CheckStock, "undersold", scarce, "%d orders rejected while %d units stayed available", scarceRejected, c.s.StockEnd[scarce].Available)
	}
}

func uncertainNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", or up to %d more from receipts with no definite answer", n)
}

func (c *checker) leftovers() {
	for _, svc := range sortedKeys(c.s.Services) {
		l := c.s.Services[svc]
		subject := "service " + svc
		for _, st := range []string{"pending", "sending"} {
			if n := l.Outbox[st]; n > 0 {
				c.add(CheckLeftovers, "outbox", subject, "%d outbox rows %s at rest", n, st)
			}
		}
		for _, group := range []struct {
			rule  string
			items []Item
		}{{"outbox", l.FailedEvents}, {"dead-letter", l.DeadLetters}, {"parked", l.Parked}, {"gap", l.Gaps}, {"needs-attention", l.NeedsAttention}} {
			for _, it := range group.items {
				c.add(CheckLeftovers, group.rule, subject, "%s: %s", it.ID, it.Detail)
			}
		}
	}
	if !c.s.Rest.Reached {
		c.add(CheckLeftovers, "rest", "system", "not at rest %s after the heal; still waiting for %s", round(c.s.Rest.After), c.s.Rest.Waiting)
	}
	for _, q := range sortedKeys(c.s.Broker) {
		c.add(CheckLeftovers, "broker", "queue "+q, "%d messages still held on the broker at rest (on a cluster, dead-lettered ones not yet forwarded count too)", c.s.Broker[q])
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
