package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/inbox"
)

// 去重解决不了乱序: the inbox makes an event take effect once, not in order.
// No event of the saga is a delta (each moves an aggregate between states;
// docs/contract.md, "Ordering"), so these experiments use the delta event
// inventory consumes in demo mode: a warehouse's goods-received note,
// "quantity more of this SKU on hand", numbered per inbound shipment. The
// lab sends the notes as the warehouse would, straight to the broker.

// goodsReceived is the demo delta event (inventoryapp.GoodsReceived) and
// receiptsConsumer its consumer_name at inventory.
const (
	goodsReceived    = "warehouse.goods-received"
	receiptsConsumer = "inventory-receipts"
)

// deltaSKU is the SKU the notes restock.
const deltaSKU = "SKU-3"

// goodsNote is version v of shipment's notes: qty more of sku.
func goodsNote(shipment, v uint64, sku string, qty int) events.Envelope {
	body, _ := json.Marshal(map[string]any{"sku": sku, "quantity": qty})
	return events.Envelope{EventID: uuid.NewString(), Type: goodsReceived, AggregateID: shipment, AggregateVersion: v,
		SchemaVersion: events.CurrentSchemaVersion, CorrelationID: fmt.Sprint(shipment), OccurredAt: time.Now().UTC(), Payload: body}
}

// newShipment numbers a new inbound shipment, so each run starts its own
// sequence of versions.
func newShipment() uint64 { return uint64(time.Now().UnixMicro()) }

// Parked is a delta event waiting for an earlier version (GET /admin/parked).
type Parked struct {
	EventID          string     `json:"event_id"`
	AggregateVersion uint64     `json:"aggregate_version"`
	WaitingFor       uint64     `json:"waiting_for_version"`
	ParkedAt         time.Time  `json:"parked_at"`
	DeadlineAt       time.Time  `json:"deadline_at"`
	AppliedAt        *time.Time `json:"applied_at"`
	AlertedAt        *time.Time `json:"alerted_at"`
}

// parked returns inventory's parked record of one event (found=false: none).
func (l *Lab) parked(ctx context.Context, eventID string) (Parked, bool, error) {
	var out struct {
		Parked []Parked `json:"parked"`
	}
	if err := l.get(ctx, "inventory", "/admin/parked?state=all&limit=1000", &out); err != nil {
		return Parked{}, false, err
	}
	for _, p := range out.Parked {
		if p.EventID == eventID {
			return p, true, nil
		}
	}
	return Parked{}, false, nil
}

// waitParked waits until inventory's parked record of e satisfies cond.
func (l *Lab) waitParked(ctx context.Context, what string, e events.Envelope, patience time.Duration, cond func(Parked) bool) (Parked, error) {
	var p Parked
	err := l.waitUpTo(ctx, what, patience, func() (bool, error) {
		got, found, err := l.parked(ctx, e.EventID)
		p = got
		return found && cond(got), err
	})
	return p, err
}

// receipts counts a metric of the notes' consumer.
func (l *Lab) receipts(ctx context.Context, name string) float64 {
	v, _ := l.metric(ctx, "inventory", name, "consumer", receiptsConsumer)
	return v
}

// deltaSnapshot records the stock, the parked records and the inbox rows
// of the notes.
func (l *Lab) deltaSnapshot(ctx context.Context, title string, notes ...events.Envelope) Section {
	s := Section{Title: title, Tables: []Table{l.stockTable(ctx, deltaSKU)}}
	park := Table{Title: "inventory: parked_events", Header: []string{"event_id", "version", "waiting_for", "parked_at", "deadline_at", "applied_at", "alerted_at"}}
	in := Table{Title: inbox.Table + " (inventory)", Header: []string{"consumer", "event_id", "version", "processed_at"}}
	var ids []string
	version := map[string]uint64{}
	for _, e := range notes {
		ids = append(ids, e.EventID)
		version[e.EventID] = e.AggregateVersion
		p, found, err := l.parked(ctx, e.EventID)
		switch {
		case err != nil:
			park.Rows = append(park.Rows, []string{short(e.EventID), "error: " + err.Error()})
		case found:
			park.Rows = append(park.Rows, []string{short(p.EventID), fmt.Sprint(p.AggregateVersion), fmt.Sprint(p.WaitingFor),
				clock(&p.ParkedAt), clock(&p.DeadlineAt), clock(p.AppliedAt), clock(p.AlertedAt)})
		}
	}
	rows, err := l.inbox(ctx, "inventory", ids)
	if err != nil {
		in.Rows = append(in.Rows, []string{"error: " + err.Error()})
	}
	for _, r := range rows {
		in.Rows = append(in.Rows, []string{r.Consumer, short(r.EventID), fmt.Sprint(version[r.EventID]), clock(&r.ProcessedAt)})
	}
	s.Tables = append(s.Tables, park, in)
	l.step(Step{Kind: StepSection, Section: &s})
	return s
}

// noteRows returns the inbox rows of the notes, by event id.
func (l *Lab) noteRows(ctx context.Context, notes ...events.Envelope) (map[string][]InboxRow, error) {
	var ids []string
	for _, e := range notes {
		ids = append(ids, e.EventID)
	}
	rows, err := l.inbox(ctx, "inventory", ids)
	out := map[string][]InboxRow{}
	for _, r := range rows {
		out[r.EventID] = append(out[r.EventID], r)
	}
	return out, err
}

// parkNote sends note v2 of a new shipment ahead of v1 and checks that it
// waits: parked, acked, nothing applied.
func (l *Lab) parkNote(ctx context.Context, r *Report, before Stock, v1, v2 events.Envelope) (Parked, error) {
	parked0, retries0 := l.receipts(ctx, "consumer_parked_total"), l.receipts(ctx, "consumer_retries_total")
	if err := l.publish(ctx, v2, fmt.Sprintf("the warehouse's note v2 of shipment %d (+%s), v1 held back", v2.AggregateID, quantityOf(v2))); err != nil {
		return Parked{}, err
	}
	// The counter follows the commit the parked row shows: wait for both.
	p, err := l.waitParked(ctx, "note v2 to be parked", v2, l.Patience, func(Parked) bool {
		return l.receipts(ctx, "consumer_parked_total") > parked0
	})
	if err != nil {
		return p, err
	}
	mid, _ := l.stock(ctx, deltaSKU)
	rows, _ := l.noteRows(ctx, v1, v2)
	parked1, retries1 := l.receipts(ctx, "consumer_parked_total"), l.receipts(ctx, "consumer_retries_total")
	r.Sections = append(r.Sections, l.deltaSnapshot(ctx, "note v2 arrived ahead of v1: parked", v1, v2))
	r.check(p.WaitingFor == 1 && p.AppliedAt == nil && parked1 == parked0+1, "state: v2 parked, waiting for version 1",
		"parked record of v2: waiting for v%d, applied %s; consumer_parked_total{%s} %g -> %g",
		p.WaitingFor, clock(p.AppliedAt), receiptsConsumer, parked0, parked1)
	r.checkStockUnchanged("nothing applied ahead of the gap", before, mid)
	r.check(len(rows[v2.EventID]) == 0 && retries1 == retries0, "side effects: acked as a waiting task, not processed, not retried",
		"%d inbox row(s) for v2; consumer_retries_total{%s} %g -> %g", len(rows[v2.EventID]), receiptsConsumer, retries0, retries1)
	return p, nil
}

// fillGap sends note v1 and checks that v1 and then the parked v2 apply,
// each once, in order.
func (l *Lab) fillGap(ctx context.Context, r *Report, title, as string, before Stock, v1, v2 events.Envelope) error {
	unparked0 := l.receipts(ctx, "consumer_unparked_total")
	if err := l.publish(ctx, v1, as); err != nil {
		return err
	}
	p, err := l.waitParked(ctx, "v1 to apply and the parked v2 to follow", v2, l.Patience, func(p Parked) bool {
		return p.AppliedAt != nil && l.receipts(ctx, "consumer_unparked_total") > unparked0
	})
	if err != nil {
		return err
	}
	after, _ := l.stock(ctx, deltaSKU)
	rows, _ := l.noteRows(ctx, v1, v2)
	unparked1 := l.receipts(ctx, "consumer_unparked_total")
	r.Sections = append(r.Sections, l.deltaSnapshot(ctx, title, v1, v2))
	q1, q2 := quantity(v1), quantity(v2)
	r.check(after.OnHand == before.OnHand+q1+q2 && after.Reserved == before.Reserved, "quantity: each note applied once",
		"%s on_hand %d -> %d (+%d, +%d), reserved %d -> %d", deltaSKU, before.OnHand, after.OnHand, q1, q2, before.Reserved, after.Reserved)
	inOrder := len(rows[v1.EventID]) == 1 && len(rows[v2.EventID]) == 1 &&
		!rows[v2.EventID][0].ProcessedAt.Before(rows[v1.EventID][0].ProcessedAt)
	r.check(inOrder && unparked1 == unparked0+1 && !p.AppliedAt.Before(p.ParkedAt), "state: v1, then the parked v2, in order",
		"inbox rows: v1 %d, v2 %d (v1 at %s, v2 at %s); parked v2 applied %s; consumer_unparked_total{%s} %g -> %g",
		len(rows[v1.EventID]), len(rows[v2.EventID]), clockOf(rows[v1.EventID]), clockOf(rows[v2.EventID]),
		clock(p.AppliedAt), receiptsConsumer, unparked0, unparked1)
	return nil
}

func quantity(e events.Envelope) int {
	var p struct {
		Quantity int `json:"quantity"`
	}
	_ = json.Unmarshal(e.Payload, &p)
	return p.Quantity
}

func quantityOf(e events.Envelope) string { return fmt.Sprint(quantity(e)) }

func clockOf(rows []InboxRow) string {
	if len(rows) == 0 {
		return "-"
	}
	return clock(&rows[0].ProcessedAt)
}

// --- delta parking ---------------------------------------------------------

func deltaParking(ctx context.Context, l *Lab, r *Report, _ bool) error {
	before, err := l.stock(ctx, deltaSKU)
	if err != nil {
		return err
	}
	shipment := newShipment()
	v1, v2 := goodsNote(shipment, 1, deltaSKU, 3), goodsNote(shipment, 2, deltaSKU, 4)
	r.Sections = append(r.Sections, l.deltaSnapshot(ctx, "before the fault", v1, v2))
	if _, err := l.parkNote(ctx, r, before, v1, v2); err != nil {
		return err
	}
	if err := l.fillGap(ctx, r, "note v1 arrived: v1 and the parked v2 applied, in order", "the late note v1", before, v1, v2); err != nil {
		return err
	}
	// A copy of a note already applied is a duplicate like any other.
	after, _ := l.stock(ctx, deltaSKU)
	dups0 := l.receipts(ctx, "consumer_duplicates_suppressed_total")
	if err := l.publish(ctx, v2); err != nil {
		return err
	}
	if err := l.waitFor(ctx, "inventory to drop the copy of v2", func() (bool, error) {
		return l.receipts(ctx, "consumer_duplicates_suppressed_total") > dups0, nil
	}); err != nil {
		return err
	}
	final, _ := l.stock(ctx, deltaSKU)
	rows, _ := l.noteRows(ctx, v2)
	r.Sections = append(r.Sections, l.deltaSnapshot(ctx, "a copy of v2 arrived again", v1, v2))
	r.check(final == after && len(rows[v2.EventID]) == 1, "side effects: a copy of an applied note changes nothing",
		"%s on_hand %d -> %d; %d inbox row(s) for v2", deltaSKU, after.OnHand, final.OnHand, len(rows[v2.EventID]))
	r.Verdict = "held: the inbox would have taken v2 as a new event; the delta strategy (pkg/ordering) parked it " +
		"instead (acked, kept in parked_events, not in the inbox, nothing applied) because version 1 had not been " +
		"applied. When v1 came, it and then the parked v2 applied in one transaction, in version order, each once."
	return nil
}

// --- delta overdue ---------------------------------------------------------

func deltaOverdue(ctx context.Context, l *Lab, r *Report, _ bool) error {
	before, err := l.stock(ctx, deltaSKU)
	if err != nil {
		return err
	}
	shipment := newShipment()
	v1, v2 := goodsNote(shipment, 1, deltaSKU, 2), goodsNote(shipment, 2, deltaSKU, 5)
	r.Sections = append(r.Sections, l.deltaSnapshot(ctx, "before the fault", v1, v2))
	overdue0, _ := l.metric(ctx, "inventory", "consumer_parked_events", "state", "overdue")
	p, err := l.parkNote(ctx, r, before, v1, v2)
	if err != nil {
		return err
	}
	// The wait is the stack's PARK_DEADLINE, then a round of the overdue
	// check (a quarter of it, at most 30 s): longer than l.Patience on a
	// stack with the default five minutes.
	deadline := p.DeadlineAt.Sub(p.ParkedAt)
	round := min(30*time.Second, max(deadline/4, 100*time.Millisecond))
	wait := max(l.Patience, time.Until(p.DeadlineAt)+2*round+10*time.Second)
	alerted, err := l.waitParked(ctx, fmt.Sprintf("v2's deadline (PARK_DEADLINE %s) to pass and the overdue check to alert", deadline),
		v2, wait, func(p Parked) bool { return p.AlertedAt != nil })
	if err != nil {
		return err
	}
	overdue1, _ := l.metric(ctx, "inventory", "consumer_parked_events", "state", "overdue")
	mid, _ := l.stock(ctx, deltaSKU)
	rows, _ := l.noteRows(ctx, v2)
	r.Sections = append(r.Sections, l.deltaSnapshot(ctx, "past its deadline: alerted on, kept", v1, v2))
	r.check(!alerted.AlertedAt.Before(alerted.DeadlineAt) && overdue1 == overdue0+1, "the alert fired after the deadline",
		"deadline %s, alerted %s; consumer_parked_events{state=\"overdue\"} %g -> %g",
		clock(&alerted.DeadlineAt), clock(alerted.AlertedAt), overdue0, overdue1)
	r.check(alerted.AppliedAt == nil && len(rows[v2.EventID]) == 0, "state: the parked record is kept as the recovery record",
		"v2 still parked (applied %s), %d inbox row(s)", clock(alerted.AppliedAt), len(rows[v2.EventID]))
	r.checkStockUnchanged("the gap is never skipped", before, mid)
	// One more round of the check: the alert is a compare-and-set on
	// alerted_at, so it does not fire again.
	l.step(Step{Kind: StepWaiting, What: "another round of the overdue check"})
	time.Sleep(round + time.Second)
	l.step(Step{Kind: StepWaited, What: "another round of the overdue check", Seconds: (round + time.Second).Seconds()})
	again, _, err := l.parked(ctx, v2.EventID)
	if err != nil {
		return err
	}
	r.check(again.AlertedAt != nil && again.AlertedAt.Equal(*alerted.AlertedAt), "side effects: alerted once",
		"alerted_at %s, a round later %s", clock(alerted.AlertedAt), clock(again.AlertedAt))

	// Recovery: the missing note, redriven from the producer, closes the gap.
	if err := l.fillGap(ctx, r, "the missing v1 arrived (redriven): both applied, in order", "the missing note v1, redriven by the warehouse", before, v1, v2); err != nil {
		return err
	}
	overdue2, _ := l.metric(ctx, "inventory", "consumer_parked_events", "state", "overdue")
	r.check(overdue2 == overdue0, "the alert cleared", "consumer_parked_events{state=\"overdue\"} %g -> %g", overdue1, overdue2)
	r.Verdict = "held: v2 waited in parked_events for a version that never came; past its deadline (PARK_DEADLINE) " +
		"the overdue check alerted on it once (alerted_at, consumer_parked_events{state=\"overdue\"}) and kept it as " +
		"the recovery record, never skipping the gap. When the missing v1 was redriven, both applied in order."
	return nil
}
