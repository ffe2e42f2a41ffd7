package chaos

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/relmsg/ordersaga/pkg/base/wire"
)

// readLeftovers reads what a service holds that a system at rest must not,
// through /admin: outbox counts and failed rows, dead letters, parked
// events, and the service's own parked work (inventory's open gaps,
// payment's needs_attention).
func (o *observer) readLeftovers(ctx context.Context, svc string) (Leftovers, []Item, error) {
	l := Leftovers{Outbox: map[string]int64{}}
	var sum struct {
		ByStatus map[string]int64 `json:"by_status"`
	}
	if err := o.lab.Get(ctx, svc, "/admin/outbox/summary", &sum); err != nil {
		return l, nil, err
	}
	l.Outbox["pending"], l.Outbox["sending"] = sum.ByStatus["pending"], sum.ByStatus["sending"]
	failed, err := o.failedEvents(ctx, svc)
	if err != nil {
		return l, nil, err
	}
	if l.DeadLetters, err = o.deadLetters(ctx, svc); err != nil {
		return l, nil, err
	}
	if l.Parked, err = o.parked(ctx, svc); err != nil {
		return l, nil, err
	}
	switch svc {
	case "inventory":
		l.Gaps, err = o.openGaps(ctx, svc)
	case "payment":
		l.NeedsAttention, err = o.needsAttention(ctx, svc)
	}
	return l, failed, err
}

// adminItems reads the list under key of a service's admin answer and
// names each row for a reader.
func adminItems[R any](ctx context.Context, o *observer, svc, path, key string, item func(R) Item) ([]Item, error) {
	var page map[string]json.RawMessage
	if err := o.lab.Get(ctx, svc, path, &page); err != nil {
		return nil, err
	}
	var rows []R
	if raw, ok := page[key]; ok {
		if err := json.Unmarshal(raw, &rows); err != nil {
			return nil, fmt.Errorf("%s %s: %w", svc, path, err)
		}
	}
	var items []Item
	for _, r := range rows {
		items = append(items, item(r))
	}
	return items, nil
}

// failedEvents lists the service's outbox rows that gave up.
func (o *observer) failedEvents(ctx context.Context, svc string) ([]Item, error) {
	type row struct {
		EventID     string `json:"event_id"`
		EventType   string `json:"event_type"`
		AggregateID string `json:"aggregate_id"`
		Attempts    int    `json:"attempts"`
	}
	return adminItems(ctx, o, svc, "/admin/outbox?status=failed&limit=1000", "events", func(e row) Item {
		return Item{ID: "event " + e.EventID,
			Detail: fmt.Sprintf("%s of order %s failed after %d attempts", e.EventType, e.AggregateID, e.Attempts)}
	})
}

// deadLetters lists the service's dead letters not yet redriven.
func (o *observer) deadLetters(ctx context.Context, svc string) ([]Item, error) {
	type row struct {
		ID        uint64 `json:"id"`
		Consumer  string `json:"consumer"`
		EventID   string `json:"event_id"`
		EventType string `json:"event_type"`
		Reason    string `json:"reason"`
		Attempts  int    `json:"attempts"`
	}
	return adminItems(ctx, o, svc, "/admin/dead-letters?status=dead&limit=1000", "dead_letters", func(d row) Item {
		return Item{ID: fmt.Sprintf("dead letter %d", d.ID),
			Detail: fmt.Sprintf("%s %s (%s) after %d attempts: %s", d.Consumer, d.EventType, d.EventID, d.Attempts, clip(d.Reason, 120))}
	})
}

// parked lists the events the service's consumers hold back, waiting for
// an earlier version of their aggregate.
func (o *observer) parked(ctx context.Context, svc string) ([]Item, error) {
	type row struct {
		Consumer    string `json:"consumer"`
		EventID     string `json:"event_id"`
		EventType   string `json:"event_type"`
		AggregateID string `json:"aggregate_id"`
		Version     uint64 `json:"aggregate_version"`
		WaitingFor  uint64 `json:"waiting_for_version"`
	}
	return adminItems(ctx, o, svc, "/admin/parked?state=waiting&limit=1000", "parked", func(p row) Item {
		return Item{ID: p.Consumer + " " + p.EventID,
			Detail: fmt.Sprintf("%s v%d of %s waits for v%d", p.EventType, p.Version, p.AggregateID, p.WaitingFor)}
	})
}

// openGaps lists inventory's open version gaps.
func (o *observer) openGaps(ctx context.Context, svc string) ([]Item, error) {
	return adminItems(ctx, o, svc, "/admin/gaps?open=true&limit=1000", "gaps", func(g wire.Gap) Item {
		return Item{ID: fmt.Sprintf("gap %d", g.ID),
			Detail: fmt.Sprintf("order %s: %s v%d arrived, v%d never did", g.AggregateID, g.EventType, g.ReceivedVersion, g.ExpectedVersion)}
	})
}

// needsAttention lists payment's charges and refunds parked for a person.
func (o *observer) needsAttention(ctx context.Context, svc string) ([]Item, error) {
	var att wire.NeedsAttention
	if err := o.lab.Get(ctx, svc, "/admin/needs-attention?limit=1000", &att); err != nil {
		return nil, err
	}
	var items []Item
	for _, c := range att.Charges {
		items = append(items, Item{ID: "charge of order " + c.OrderID, Detail: clip(c.ParkedReason, 120)})
	}
	for _, f := range att.Refunds {
		items = append(items, Item{ID: "refund of order " + f.OrderID, Detail: clip(f.ParkedReason, 120)})
	}
	return items, nil
}

// baseline is the leftovers a live stack already had before the run: they
// are not the run's doing, and the report leaves them out.
type baseline map[string]bool

func (b baseline) add(svc string, items ...[]Item) {
	for _, list := range items {
		for _, it := range list {
			b[svc+"|"+it.ID] = true
		}
	}
}

func (b baseline) fresh(svc string, items []Item) []Item {
	var out []Item
	for _, it := range items {
		if !b[svc+"|"+it.ID] {
			out = append(out, it)
		}
	}
	return out
}

// readBaseline records every leftover present before the run.
func (o *observer) readBaseline(ctx context.Context) (baseline, error) {
	b := baseline{}
	for _, svc := range Services {
		l, failed, err := o.readLeftovers(ctx, svc)
		if err != nil {
			return nil, fmt.Errorf("%s admin endpoints (is ADMIN_TOKEN right?): %w", svc, err)
		}
		b.add(svc, failed, l.DeadLetters, l.Parked, l.Gaps, l.NeedsAttention)
	}
	return b, nil
}

// leftoversAtRest reads every service's leftovers, without those of the
// baseline.
func (o *observer) leftoversAtRest(ctx context.Context, b baseline) (map[string]Leftovers, error) {
	out := map[string]Leftovers{}
	for _, svc := range Services {
		l, failed, err := o.readLeftovers(ctx, svc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", svc, err)
		}
		l.FailedEvents = b.fresh(svc, failed)
		l.DeadLetters = b.fresh(svc, l.DeadLetters)
		l.Parked = b.fresh(svc, l.Parked)
		l.Gaps = b.fresh(svc, l.Gaps)
		l.NeedsAttention = b.fresh(svc, l.NeedsAttention)
		out[svc] = l
	}
	return out, nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
