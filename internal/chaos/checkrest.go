package chaos

import (
	"fmt"
	"sort"
)

// The checks of the whole run at rest: stock conservation per SKU and what
// is left over in the services and on the broker.

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
