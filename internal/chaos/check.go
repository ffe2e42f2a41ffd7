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
