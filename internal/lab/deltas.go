package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/relmsg/ordersaga/pkg/base/events"
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
func (l *Lab) parkNote(ctx context.Context, r *Report, v1, v2 events.Envelope) (Parked, error) {
	if err := l.publish(ctx, v2, fmt.Sprintf("the warehouse's note v2 of shipment %d (+%s), v1 held back", v2.AggregateID, quantityOf(v2))); err != nil {
		return Parked{}, err
	}
	// The log line follows the commit the parked row shows: wait for both.
	if _, err := l.waitLogged(ctx, "inventory to log that it parked note v2", "inventory", receiptsConsumer, logParked, v2.EventID, 1); err != nil {
		return Parked{}, err
	}
	p, err := l.waitParked(ctx, "note v2 to be parked", v2, l.Patience, func(Parked) bool { return true })
	if err != nil {
		return p, err
	}
	rows, _ := l.noteRows(ctx, v1, v2)
	told := l.told(ctx, "inventory", v2.EventID)
	r.Sections = append(r.Sections, l.deltaSnapshot(ctx, "note v2 arrived ahead of v1: parked", v1, v2))
	r.check(p.WaitingFor == 1 && p.AppliedAt == nil, chkDPParked, p.WaitingFor, clock(p.AppliedAt))
	r.check(len(rows[v1.EventID]) == 0 && len(rows[v2.EventID]) == 0, chkDPNotYet, len(rows[v1.EventID]), len(rows[v2.EventID]))
	parked, processed, retried := told.count(receiptsConsumer, logParked), told.count(receiptsConsumer, logProcessed), told.count(receiptsConsumer, logRetry)
	r.check(parked == 1 && processed == 0 && retried == 0, chkDPWaiting, receiptsConsumer, parked, processed, retried)
	return p, nil
}

// fillGap sends note v1 and checks that v1 and then the parked v2 apply,
// each once, in order.
func (l *Lab) fillGap(ctx context.Context, r *Report, title, as string, v1, v2 events.Envelope) error {
	if err := l.publish(ctx, v1, as); err != nil {
		return err
	}
	p, err := l.waitParked(ctx, "v1 to apply and the parked v2 to follow", v2, l.Patience, func(p Parked) bool {
		return p.AppliedAt != nil
	})
	if err != nil {
		return err
	}
	rows, _ := l.noteRows(ctx, v1, v2)
	r.Sections = append(r.Sections, l.deltaSnapshot(ctx, title, v1, v2))
	r.check(len(rows[v1.EventID]) == 1 && len(rows[v2.EventID]) == 1, chkDPOnce,
		len(rows[v1.EventID]), len(rows[v2.EventID]), quantity(v1), quantity(v2), deltaSKU)
	inOrder := len(rows[v1.EventID]) == 1 && len(rows[v2.EventID]) == 1 &&
		!rows[v2.EventID][0].ProcessedAt.Before(rows[v1.EventID][0].ProcessedAt)
	r.check(inOrder && !p.AppliedAt.Before(p.ParkedAt), chkDPInOrder, clockOf(rows[v1.EventID]), clockOf(rows[v2.EventID]), clock(p.AppliedAt))
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
	shipment := newShipment()
	v1, v2 := goodsNote(shipment, 1, deltaSKU, 3), goodsNote(shipment, 2, deltaSKU, 4)
	r.Sections = append(r.Sections, l.deltaSnapshot(ctx, "before the fault", v1, v2))
	if _, err := l.parkNote(ctx, r, v1, v2); err != nil {
		return err
	}
	if err := l.fillGap(ctx, r, "note v1 arrived: v1 and the parked v2 applied, in order", "the late note v1", v1, v2); err != nil {
		return err
	}
	// A copy of a note already applied is a duplicate like any other.
	if err := l.publish(ctx, v2); err != nil {
		return err
	}
	told, err := l.waitLogged(ctx, "inventory to drop the copy of v2", "inventory", receiptsConsumer, logDuplicate, v2.EventID, 1)
	if err != nil {
		return err
	}
	rows, _ := l.noteRows(ctx, v2)
	r.Sections = append(r.Sections, l.deltaSnapshot(ctx, "a copy of v2 arrived again", v1, v2))
	processed, dropped := told.inbox(receiptsConsumer)
	r.check(len(rows[v2.EventID]) == 1 && dropped == 1, chkDPCopy, len(rows[v2.EventID]), receiptsConsumer, short(v2.EventID), processed, dropped)
	r.Verdict = "held: the inbox would have taken v2 as a new event; the delta strategy (pkg/ordering) parked it " +
		"instead (acked, kept in parked_events, not in the inbox, nothing applied) because version 1 had not been " +
		"applied. When v1 came, it and then the parked v2 applied in one transaction, in version order, each once."
	return nil
}

// --- delta overdue ---------------------------------------------------------

func deltaOverdue(ctx context.Context, l *Lab, r *Report, _ bool) error {
	shipment := newShipment()
	v1, v2 := goodsNote(shipment, 1, deltaSKU, 2), goodsNote(shipment, 2, deltaSKU, 5)
	r.Sections = append(r.Sections, l.deltaSnapshot(ctx, "before the fault", v1, v2))
	p, err := l.parkNote(ctx, r, v1, v2)
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
	// The alert's log line follows the stamp: wait for it.
	told, err := l.waitLogged(ctx, "inventory to log its alert on v2", "inventory", "", logOverdue, v2.EventID, 1)
	if err != nil {
		return err
	}
	rows, _ := l.noteRows(ctx, v1, v2)
	r.Sections = append(r.Sections, l.deltaSnapshot(ctx, "past its deadline: alerted on, kept", v1, v2))
	alerts := told.count("", logOverdue)
	r.check(!alerted.AlertedAt.Before(alerted.DeadlineAt) && alerts == 1, chkDOAlerted,
		clock(&alerted.DeadlineAt), clock(alerted.AlertedAt), "inventory", alerts)
	r.check(alerted.AppliedAt == nil && len(rows[v2.EventID]) == 0, chkDOKept, clock(alerted.AppliedAt), len(rows[v2.EventID]))
	r.check(len(rows[v1.EventID]) == 0 && len(rows[v2.EventID]) == 0, chkDONotSkip, len(rows[v1.EventID]), len(rows[v2.EventID]))
	// One more round of the check: the alert is a compare-and-set on
	// alerted_at, so it does not fire again.
	l.step(Step{Kind: StepWaiting, What: "another round of the overdue check"})
	time.Sleep(round + time.Second)
	l.step(Step{Kind: StepWaited, What: "another round of the overdue check", Seconds: (round + time.Second).Seconds()})
	again, _, err := l.parked(ctx, v2.EventID)
	if err != nil {
		return err
	}
	alerts = l.told(ctx, "inventory", v2.EventID).count("", logOverdue)
	r.check(again.AlertedAt != nil && again.AlertedAt.Equal(*alerted.AlertedAt) && alerts == 1, chkDOOnce,
		clock(alerted.AlertedAt), clock(again.AlertedAt), alerts, "inventory")

	// Recovery: the missing note, redriven from the producer, closes the gap.
	if err := l.fillGap(ctx, r, "the missing v1 arrived (redriven): both applied, in order", "the missing note v1, redriven by the warehouse", v1, v2); err != nil {
		return err
	}
	final, _, err := l.parked(ctx, v2.EventID)
	if err != nil {
		return err
	}
	r.check(final.AppliedAt != nil, chkDOCleared, clock(final.AppliedAt))
	r.Verdict = "held: v2 waited in parked_events for a version that never came; past its deadline (PARK_DEADLINE) " +
		"the overdue check alerted on it once (alerted_at, consumer_parked_events{state=\"overdue\"}) and kept it as " +
		"the recovery record, never skipping the gap. When the missing v1 was redriven, both applied in order."
	return nil
}
