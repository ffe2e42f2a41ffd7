package orderapp

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
	"github.com/relmsg/ordersaga/services/order/internal/peerclient"
)

// Timeline is one order's story across the three services, in time order:
// the order's own changes (order_history), every outbox row of every service
// for the order (written, and sent, as separate entries), every inbox row of
// every service for those events, inventory's reservation, payment's payment
// and refund, and the reconciler's audit rows.
//
// outbox.sent is when the dispatcher recorded the broker's confirm (the
// chapter's "sent": the sending phase is over). A fast consumer may process
// the message before that moment, so an inbox.processed entry can come
// before the outbox.sent of its event: that is the real order of events,
// not a bug.
//
// Times are each service's database time. On one database server (the
// development setup, the tests) they share a clock; across servers they
// can be skewed by the servers' clock difference, which is why causality
// inside a service (inbox, change, outbox of one transaction) is kept by
// the order of entries that share a timestamp.
type Timeline struct {
	OrderID  string          `json:"order_id"`
	Status   string          `json:"status"`
	Entries  []TimelineEntry `json:"entries"`
	Warnings []string        `json:"warnings,omitempty"` // services that could not be asked
}

// TimelineEntry is one thing that happened.
type TimelineEntry struct {
	At      time.Time      `json:"at"`
	Service string         `json:"service"` // order, inventory, payment
	Kind    string         `json:"kind"`
	Detail  map[string]any `json:"detail"`
}

// Timeline kinds.
const (
	KindOrderCreated       = "order.created"       // the order row and its first history row
	KindOrderTransition    = "order.transition"    // a status (or refund status) change
	KindInboxProcessed     = "inbox.processed"     // a consumer processed an event (the inbox row)
	KindOutboxWritten      = "outbox.written"      // an event written to an outbox (created_at)
	KindOutboxSent         = "outbox.sent"         // the broker confirmed it (sent_at)
	KindReservationCreated = "reservation.created" // inventory's reservation row
	KindReservationUpdated = "reservation.updated" // its last change
	KindReservationExpired = "reservation.expired" // its lease ran out
	KindPaymentCreated     = "payment.created"     // payment's row
	KindPaymentUpdated     = "payment.updated"     // its last change
	KindRefundRequested    = "refund.requested"    // a refund row
	KindRefundUpdated      = "refund.updated"      // its last change
	KindRepair             = "reconciliation.repair"
)

// Timeline builds the timeline of order id. A service that cannot be asked
// leaves a warning, not an error: the rest is still worth seeing.
func (a *App) Timeline(ctx context.Context, id uint64) (Timeline, error) {
	o, err := orderdb.Get(ctx, a.db, id)
	if err != nil {
		return Timeline{}, err
	}
	tl := Timeline{OrderID: strconv.FormatUint(id, 10), Status: string(o.Status), Entries: []TimelineEntry{}}
	history, err := orderdb.History(ctx, a.db, id)
	if err != nil {
		return Timeline{}, err
	}
	own, err := outbox.OfAggregate(ctx, a.db, id)
	if err != nil {
		return Timeline{}, err
	}
	audits, err := orderdb.Audits(ctx, a.db, id, 1000)
	if err != nil {
		return Timeline{}, err
	}

	// Every service's outbox rows for the order; their ids select the inbox
	// rows.
	type event struct{ service, typ string }
	events := map[string]event{}
	var ids []string
	outboxes := map[string][]peerclient.OutboxEvent{"order": {}}
	for _, e := range own {
		outboxes["order"] = append(outboxes["order"], peerclient.OutboxEvent{EventID: e.EventID, AggregateVersion: e.AggregateVersion,
			EventType: e.EventType, Status: e.Status, Attempts: e.Attempts, CreatedAt: e.CreatedAt, SentAt: e.SentAt})
	}
	var (
		res *peerclient.Reservation
		pay *peerclient.Payment
	)
	peers := a.cfg.Peers
	if peers == nil {
		tl.Warnings = append(tl.Warnings, "no peers configured: inventory and payment not asked")
	} else {
		for _, svc := range []string{peerclient.InventoryService, peerclient.PaymentService} {
			rows, _, err := peers.Outbox(ctx, svc, id)
			if err != nil {
				tl.Warnings = append(tl.Warnings, err.Error())
				continue
			}
			outboxes[svc] = rows
		}
		if res, _, err = peers.Reservation(ctx, id); err != nil {
			tl.Warnings = append(tl.Warnings, err.Error())
		}
		if pay, _, err = peers.Payment(ctx, id); err != nil {
			tl.Warnings = append(tl.Warnings, err.Error())
		}
	}
	for _, svc := range []string{"order", peerclient.InventoryService, peerclient.PaymentService} {
		for _, e := range outboxes[svc] {
			events[e.EventID] = event{service: svc, typ: e.EventType}
			ids = append(ids, e.EventID)
		}
	}

	// Appended in the order things happen inside one transaction (inbox
	// row, then the change, then the outbox row), so that a stable sort
	// keeps that order among entries with the same timestamp.
	var entries []TimelineEntry
	add := func(at time.Time, service, kind string, detail map[string]any) {
		entries = append(entries, TimelineEntry{At: at.UTC(), Service: service, Kind: kind, Detail: detail})
	}
	addInbox := func(service string, rows []peerclient.InboxRow) {
		for _, r := range rows {
			e := events[r.EventID]
			add(r.ProcessedAt, service, KindInboxProcessed, map[string]any{"consumer": r.Consumer, "event_id": r.EventID,
				"event_type": e.typ, "from": e.service})
		}
	}
	if mine, err := inbox.Rows(ctx, a.db, ids); err != nil {
		return Timeline{}, err
	} else {
		rows := make([]peerclient.InboxRow, len(mine))
		for i, r := range mine {
			rows[i] = peerclient.InboxRow{Consumer: r.Consumer, EventID: r.EventID, ProcessedAt: r.ProcessedAt}
		}
		addInbox("order", rows)
	}
	if peers != nil && len(ids) > 0 {
		for _, svc := range []string{peerclient.InventoryService, peerclient.PaymentService} {
			rows, err := peers.Inbox(ctx, svc, ids)
			if err != nil {
				tl.Warnings = append(tl.Warnings, err.Error())
			}
			addInbox(svc, rows)
		}
	}

	for _, h := range history {
		d := map[string]any{"to": h.To, "trigger": h.Trigger, "actor": h.Actor, "refund_status": h.RefundStatus}
		if h.Reason != "" {
			d["reason"] = h.Reason
		}
		setIf(d, "event_id", h.EventID)
		setIf(d, "emitted_event_id", h.EmittedEventID)
		setIf(d, "repair_id", h.RepairID)
		kind := KindOrderTransition
		if h.From == "" {
			kind = KindOrderCreated
		} else {
			d["from"] = h.From
		}
		add(h.ChangedAt, "order", kind, d)
	}
	if res != nil {
		add(res.CreatedAt, peerclient.InventoryService, KindReservationCreated, map[string]any{"status_now": res.Status})
		if res.ExpiredAt != nil {
			add(*res.ExpiredAt, peerclient.InventoryService, KindReservationExpired, map[string]any{"expires_at": res.ExpiresAt})
		}
		if res.UpdatedAt.After(res.CreatedAt) {
			d := map[string]any{"status": res.Status}
			if res.Reason != "" {
				d["reason"] = res.Reason
			}
			add(res.UpdatedAt, peerclient.InventoryService, KindReservationUpdated, d)
		}
	}
	if pay != nil {
		add(pay.CreatedAt, peerclient.PaymentService, KindPaymentCreated, map[string]any{"status_now": pay.Status,
			"amount_cents": pay.AmountCents})
		if pay.UpdatedAt.After(pay.CreatedAt) {
			d := map[string]any{"status": pay.Status}
			if pay.PSPChargeID != "" {
				d["psp_charge_id"] = pay.PSPChargeID
			}
			if pay.FailureReason != "" {
				d["failure_reason"] = pay.FailureReason
			}
			add(pay.UpdatedAt, peerclient.PaymentService, KindPaymentUpdated, d)
		}
		if f := pay.Refund; f != nil {
			add(f.CreatedAt, peerclient.PaymentService, KindRefundRequested, map[string]any{"status_now": f.Status,
				"amount_cents": f.AmountCents})
			if f.UpdatedAt.After(f.CreatedAt) {
				add(f.UpdatedAt, peerclient.PaymentService, KindRefundUpdated, map[string]any{"status": f.Status,
					"psp_refund_id": f.PSPRefundID})
			}
		}
	}
	for _, svc := range []string{"order", peerclient.InventoryService, peerclient.PaymentService} {
		for _, e := range outboxes[svc] {
			add(e.CreatedAt, svc, KindOutboxWritten, map[string]any{"event_id": e.EventID, "event_type": e.EventType,
				"aggregate_version": e.AggregateVersion, "status": e.Status, "attempts": e.Attempts})
		}
	}
	for _, svc := range []string{"order", peerclient.InventoryService, peerclient.PaymentService} {
		for _, e := range outboxes[svc] {
			if e.SentAt != nil {
				add(*e.SentAt, svc, KindOutboxSent, map[string]any{"event_id": e.EventID, "event_type": e.EventType})
			}
		}
	}
	for _, r := range audits {
		add(r.CreatedAt, "order", KindRepair, map[string]any{"repair_id": r.RepairID, "run_id": r.RunID,
			"classification": r.Classification, "action": r.Action, "outcome": r.Outcome, "detail": r.Detail})
	}
	slices.SortStableFunc(entries, func(x, y TimelineEntry) int { return x.At.Compare(y.At) })
	tl.Entries = append(tl.Entries, entries...)
	return tl, nil
}

func setIf(d map[string]any, key string, v *string) {
	if v != nil {
		d[key] = *v
	}
}

// String renders an entry on one line (logs, test failures).
func (e TimelineEntry) String() string {
	return fmt.Sprintf("%s %-9s %-20s %v", e.At.Format("15:04:05.000000"), e.Service, e.Kind, e.Detail)
}
