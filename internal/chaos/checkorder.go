package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// The checks of one order's records in every service: its outcome, the
// PSP's books, inventory's reservation, its history and its outbox events.

// order checks the order an accepted request made.
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
