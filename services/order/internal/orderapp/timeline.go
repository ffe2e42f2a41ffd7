package orderapp

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
	"github.com/relmsg/ordersaga/services/order/internal/peerclient"
)

// Timeline is one order's story across the three services, in time order:
// the order's own changes (order_history), every outbox row of every service
// for the order (written, and sent, as separate entries), every inbox row of
// every service for those events, inventory's reservation, payment's payment
// and refund, and the reconciler's audit rows. Where a row records which
// instance acted (INSTANCE_ID: the order's changes, the inbox rows, the
// dispatcher that sent an event, the reconciler's findings), the entry's
// detail names it as "instance".
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

// Timeline builds the timeline of order id in three steps: gather the
// order's records from the three services, merge them into entries (one
// per thing that happened), sort the entries by time. A service that
// cannot be asked leaves a warning, not an error: the rest is still worth
// seeing.
func (a *App) Timeline(ctx context.Context, id uint64) (Timeline, error) {
	o, err := orderdb.Get(ctx, a.db, id)
	if err != nil {
		return Timeline{}, err
	}
	rec, err := a.gather(ctx, id)
	if err != nil {
		return Timeline{}, err
	}
	return Timeline{OrderID: strconv.FormatUint(id, 10), Status: string(o.Status),
		Entries: sortByTime(rec.merge()), Warnings: rec.warnings}, nil
}

// timelineServices are the services of a timeline, in the order their
// records are merged.
var timelineServices = []string{orderService, peerclient.InventoryService, peerclient.PaymentService}

const orderService = "order"

// records is everything a timeline is drawn from, as the services keep it.
type records struct {
	history     []orderdb.Change
	audits      []orderdb.Audit
	outboxes    map[string][]peerclient.OutboxEvent // by service
	inboxes     map[string][]peerclient.InboxRow    // by service: the rows of the outboxes' events
	reservation *peerclient.Reservation             // nil: none, or inventory not asked
	payment     *peerclient.Payment                 // nil: none, or payment not asked
	warnings    []string                            // services that could not be asked
}

// gather reads the order's records: the order service's own tables, then
// the peers' over HTTP, then the inboxes, whose rows are selected by the
// event ids of every outbox.
func (a *App) gather(ctx context.Context, id uint64) (records, error) {
	rec := records{outboxes: map[string][]peerclient.OutboxEvent{}, inboxes: map[string][]peerclient.InboxRow{}}
	if err := a.gatherOwn(ctx, id, &rec); err != nil {
		return records{}, err
	}
	a.gatherPeers(ctx, id, &rec)
	if err := a.gatherInboxes(ctx, &rec); err != nil {
		return records{}, err
	}
	return rec, nil
}

// gatherOwn reads the order service's history, outbox and audit rows of
// the order, again after a transient error (a killed session).
func (a *App) gatherOwn(ctx context.Context, id uint64, rec *records) error {
	return sqldb.ReadRetry(ctx, a.txRetry(true), func() (err error) {
		if rec.history, err = orderdb.History(ctx, a.db, id); err != nil {
			return err
		}
		if rec.outboxes[orderService], err = outbox.OfAggregate(ctx, a.db, id); err != nil {
			return err
		}
		rec.audits, err = orderdb.Audits(ctx, a.db, id, 1000)
		return err
	})
}

// gatherPeers asks inventory and payment for their outbox rows and their
// record of the order (reservation, payment and refund).
func (a *App) gatherPeers(ctx context.Context, id uint64, rec *records) {
	peers := a.cfg.Peers
	if peers == nil {
		rec.warnings = append(rec.warnings, "no peers configured: inventory and payment not asked")
		return
	}
	for _, svc := range timelineServices[1:] {
		rows, _, err := peers.Outbox(ctx, svc, id)
		rec.warn(err)
		if err == nil {
			rec.outboxes[svc] = rows
		}
	}
	var err error
	rec.reservation, _, err = peers.Reservation(ctx, id)
	rec.warn(err)
	rec.payment, _, err = peers.Payment(ctx, id)
	rec.warn(err)
}

// gatherInboxes reads every service's inbox rows of the events gathered.
func (a *App) gatherInboxes(ctx context.Context, rec *records) error {
	ids := rec.eventIDs()
	var err error
	if rec.inboxes[orderService], err = inbox.Rows(ctx, a.db, ids); err != nil {
		return err
	}
	if a.cfg.Peers == nil || len(ids) == 0 {
		return nil
	}
	for _, svc := range timelineServices[1:] {
		rows, err := a.cfg.Peers.Inbox(ctx, svc, ids)
		rec.warn(err)
		rec.inboxes[svc] = rows
	}
	return nil
}

// warn keeps err, if any, as a warning of the timeline.
func (rec *records) warn(err error) {
	if err != nil {
		rec.warnings = append(rec.warnings, err.Error())
	}
}

// eventIDs lists the events of every service's outbox.
func (rec records) eventIDs() []string {
	var ids []string
	for _, svc := range timelineServices {
		for _, e := range rec.outboxes[svc] {
			ids = append(ids, e.EventID)
		}
	}
	return ids
}

// merge turns the records into entries, one per thing that happened. They
// are appended in the order things happen inside one transaction (inbox
// row, then the change, then the outbox row), so that the stable sort
// keeps that order among entries with the same timestamp. A new kind of
// entry is one more function here.
func (rec records) merge() []TimelineEntry {
	entries := []TimelineEntry{} // [] in JSON, never null
	entries = append(entries, rec.inboxEntries()...)
	entries = append(entries, historyEntries(rec.history)...)
	entries = append(entries, reservationEntries(rec.reservation)...)
	entries = append(entries, paymentEntries(rec.payment)...)
	entries = append(entries, outboxEntries(rec.outboxes)...)
	entries = append(entries, repairEntries(rec.audits)...)
	return entries
}

// sortByTime orders the entries by time. The sort is stable: entries with
// the same timestamp keep the order merge gave them.
func sortByTime(entries []TimelineEntry) []TimelineEntry {
	slices.SortStableFunc(entries, func(x, y TimelineEntry) int { return x.At.Compare(y.At) })
	return entries
}

func entry(at time.Time, service, kind string, detail map[string]any) TimelineEntry {
	return TimelineEntry{At: at.UTC(), Service: service, Kind: kind, Detail: detail}
}

// inboxEntries: a consumer of a service processed one of the events, named
// with its type and the service that sent it.
func (rec records) inboxEntries() []TimelineEntry {
	type sent struct{ service, typ string }
	events := map[string]sent{}
	for _, svc := range timelineServices {
		for _, e := range rec.outboxes[svc] {
			events[e.EventID] = sent{service: svc, typ: e.EventType}
		}
	}
	var out []TimelineEntry
	for _, svc := range timelineServices {
		for _, r := range rec.inboxes[svc] {
			e := events[r.EventID]
			d := map[string]any{"consumer": r.Consumer, "event_id": r.EventID, "event_type": e.typ, "from": e.service}
			setIf(d, "instance", r.Instance)
			out = append(out, entry(r.ProcessedAt, svc, KindInboxProcessed, d))
		}
	}
	return out
}

// historyEntries: the order's creation and each of its moves
// (order_history).
func historyEntries(history []orderdb.Change) []TimelineEntry {
	var out []TimelineEntry
	for _, h := range history {
		d := map[string]any{"to": h.To, "trigger": h.Trigger, "actor": h.Actor, "refund_status": h.RefundStatus}
		if h.Reason != "" {
			d["reason"] = h.Reason
		}
		setIf(d, "event_id", h.EventID)
		setIf(d, "emitted_event_id", h.EmittedEventID)
		setIf(d, "repair_id", h.RepairID)
		setIf(d, "instance", h.Instance)
		kind := KindOrderTransition
		if h.From == "" {
			kind = KindOrderCreated
		} else {
			d["from"] = h.From
		}
		out = append(out, entry(h.ChangedAt, orderService, kind, d))
	}
	return out
}

// reservationEntries: inventory's reservation was made, expired, last
// changed.
func reservationEntries(res *peerclient.Reservation) []TimelineEntry {
	if res == nil {
		return nil
	}
	svc := peerclient.InventoryService
	out := []TimelineEntry{entry(res.CreatedAt, svc, KindReservationCreated, map[string]any{"status_now": res.Status})}
	if res.ExpiredAt != nil {
		out = append(out, entry(*res.ExpiredAt, svc, KindReservationExpired, map[string]any{"expires_at": res.ExpiresAt}))
	}
	if res.UpdatedAt.After(res.CreatedAt) {
		d := map[string]any{"status": res.Status}
		setNonEmpty(d, "reason", res.Reason)
		out = append(out, entry(res.UpdatedAt, svc, KindReservationUpdated, d))
	}
	return out
}

// paymentEntries: payment's payment was made and last changed; its refund
// was requested and last changed.
func paymentEntries(pay *peerclient.Payment) []TimelineEntry {
	if pay == nil {
		return nil
	}
	svc := peerclient.PaymentService
	out := []TimelineEntry{entry(pay.CreatedAt, svc, KindPaymentCreated, map[string]any{"status_now": pay.Status,
		"amount_cents": pay.AmountCents})}
	if pay.UpdatedAt.After(pay.CreatedAt) {
		d := map[string]any{"status": pay.Status}
		setNonEmpty(d, "psp_charge_id", pay.PSPChargeID)
		setNonEmpty(d, "failure_reason", pay.FailureReason)
		out = append(out, entry(pay.UpdatedAt, svc, KindPaymentUpdated, d))
	}
	if f := pay.Refund; f != nil {
		out = append(out, entry(f.CreatedAt, svc, KindRefundRequested, map[string]any{"status_now": f.Status,
			"amount_cents": f.AmountCents}))
		if f.UpdatedAt.After(f.CreatedAt) {
			out = append(out, entry(f.UpdatedAt, svc, KindRefundUpdated, map[string]any{"status": f.Status,
				"psp_refund_id": f.PSPRefundID}))
		}
	}
	return out
}

// outboxEntries: every service's events, as written (created_at), then as
// sent (sent_at, the broker's confirm).
func outboxEntries(outboxes map[string][]peerclient.OutboxEvent) []TimelineEntry {
	var written, sent []TimelineEntry
	for _, svc := range timelineServices {
		for _, e := range outboxes[svc] {
			w := map[string]any{"event_id": e.EventID,
				"event_type": e.EventType, "aggregate_version": e.AggregateVersion, "status": e.Status, "attempts": e.Attempts,
				"total_attempts": e.TotalAttempts, "requeues": e.Requeues}
			setIf(w, "corrects_event_id", e.CorrectsEventID) // a correction: the event it corrects
			written = append(written, entry(e.CreatedAt, svc, KindOutboxWritten, w))
			if e.SentAt != nil {
				d := map[string]any{"event_id": e.EventID, "event_type": e.EventType}
				setIf(d, "instance", e.ClaimedBy) // the dispatcher that sent it
				sent = append(sent, entry(*e.SentAt, svc, KindOutboxSent, d))
			}
		}
	}
	return append(written, sent...)
}

// repairEntries: the reconciler's audit rows of the order.
func repairEntries(audits []orderdb.Audit) []TimelineEntry {
	out := make([]TimelineEntry, 0, len(audits))
	for _, r := range audits {
		d := map[string]any{"repair_id": r.RepairID, "run_id": r.RunID, "classification": r.Classification,
			"action": r.Action, "outcome": r.Outcome, "detail": r.Detail}
		setIf(d, "instance", r.Instance)
		out = append(out, entry(r.CreatedAt, orderService, KindRepair, d))
	}
	return out
}

func setIf(d map[string]any, key string, v *string) {
	if v != nil {
		d[key] = *v
	}
}

// setNonEmpty sets d[key] to v unless v is empty.
func setNonEmpty(d map[string]any, key, v string) {
	if v != "" {
		d[key] = v
	}
}

// String renders an entry on one line (logs, test failures).
func (e TimelineEntry) String() string {
	return fmt.Sprintf("%s %-9s %-20s %v", e.At.Format("15:04:05.000000"), e.Service, e.Kind, e.Detail)
}
