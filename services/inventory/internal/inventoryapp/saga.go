package inventoryapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorydb"
)

// The handlers below run inside the inbox transaction (pkg/inbox), through
// its Store (store.go): the inbox row, the stock and reservation changes and the events they emit
// commit together. Idempotency keys: the inbox key (consumer "inventory",
// event_id) stops a redelivered event; the reservation's primary key (the
// order id) stops a second event for the same step, so the reserve step and
// each compensation happen at most once per order whatever the event ids.
//
// Lock order: every handler takes the reservation row first (confirm,
// cancel and the lease sweep, lease.go, lock it; create inserts it), then
// stock rows in SKU order, last, right before COMMIT: the rows of busy SKUs
// are held only for the few statements at the end of a transaction, and no
// two transactions can wait for each other in a cycle.

// FailpointBeforeInsert is the window between finding no reservation for an
// order and inserting one.
const FailpointBeforeInsert = "inventory.reserve.before-insert"

func init() {
	failpoint.Register(FailpointBeforeInsert, "inventory found no reservation for an order and has not inserted its own yet: "+
		"if a cancel commits its marker now, the create must reserve nothing")
}

// holdSavepoint is where a rejected reservation returns to: after the inbox
// claim, before the reservation row and the first stock change.
const holdSavepoint = "hold_items"

// eventLog is the logger of a handler: s's, with the order and the event
// it handles.
func (a *App) eventLog(s Store, e events.Envelope, orderID uint64) *slog.Logger {
	return s.Log(a.log).With("order_id", orderID, "event_id", e.EventID, "event_type", e.Type)
}

// OnOrderCreated reserves every item of the order or none (docs/contract.md)
// and emits the result: InventoryReserved or InventoryRejected, version 1
// of the reservation. Insufficient stock is a business result, committed and
// acked like a success. An order that already has a reservation row (a
// second OrderCreated for it, or the marker of a cancel that overtook the
// create) changes nothing.
func (a *App) OnOrderCreated(ctx context.Context, s Store, e events.Envelope) error {
	p, err := events.Decode[events.OrderCreatedV1](e.Payload)
	if err != nil {
		return err
	}
	tx := s.Tx()
	log := a.eventLog(s, e, p.OrderID)
	lines := make([]inventory.Line, len(p.Items))
	for i, it := range p.Items {
		lines[i] = inventory.Line{SKU: it.SKU, Quantity: it.Quantity}
	}
	plan, err := inventory.Plan(lines)
	if err != nil {
		return inbox.Permanent(err)
	}

	// The order id is not looked up first: the reservation's primary key
	// decides, and the rare id already taken (a cancel's marker, a second
	// create) costs a failed INSERT instead of a read in every reservation.
	// Window: ours not inserted yet. A cancel that commits its marker now
	// makes our INSERT below fail on the key.
	if err := failpoint.Inject(ctx, FailpointBeforeInsert); err != nil {
		return err
	}
	if err := s.Savepoint(ctx, holdSavepoint); err != nil {
		return err
	}
	// The reservation row claims the order id. If another event for this
	// order has its row (a cancel, or a second create; one not committed
	// yet is waited for), the INSERT fails on the key: nothing is held yet,
	// so that row simply stands.
	err = inventorydb.InsertReservation(ctx, tx, inventory.Reservation{OrderID: p.OrderID, Status: inventory.Reserved, Version: 1}, a.cfg.Lease)
	if errors.Is(err, inventorydb.ErrReservationExists) {
		r, err := inventorydb.GetReservation(ctx, tx, p.OrderID)
		if err != nil {
			return err
		}
		return a.createNotApplied(ctx, tx, log, e, r)
	}
	if err != nil {
		return err
	}
	if err := inventorydb.InsertItems(ctx, tx, p.OrderID, plan); err != nil {
		return err
	}
	reserved := outbox.Event{AggregateID: p.OrderID, AggregateVersion: 1, Type: events.InventoryReserved,
		Payload: events.InventoryReservedV1{OrderID: p.OrderID, CustomerID: p.CustomerID, Items: p.Items,
			AmountCents: p.TotalCents, Currency: p.Currency}}
	if err := s.Emit(ctx, reserved); err != nil {
		return err
	}

	// All or none, and last: hold each line with a conditional UPDATE in
	// SKU order, right before COMMIT, so the rows of busy SKUs stay locked
	// for as short a time as possible (every other reservation of the same
	// SKU waits on them). If one line cannot be held, roll back to the
	// savepoint (reservation, items, event and the holds before it) and
	// record the rejection instead.
	short, err := s.Hold(ctx, plan)
	if err != nil {
		return err
	}
	if short != nil {
		return a.reject(ctx, s, log, p.OrderID, short)
	}
	log.InfoContext(ctx, "stock reserved", "items", len(plan))
	return nil
}

// reject undoes a reservation one of whose lines was short (back to the
// savepoint: reservation, items, event and the holds before it) and
// records the rejection instead: a reservation row that holds nothing, so
// has no lease, and InventoryRejected.
func (a *App) reject(ctx context.Context, s Store, log *slog.Logger, orderID uint64, short *inventory.Shortage) error {
	if err := s.RollbackTo(ctx, holdSavepoint); err != nil {
		return err
	}
	// Read only to word the reason; Hold made the decision.
	var err error
	if short.Available, short.Known, err = inventorydb.Available(ctx, s.Tx(), short.SKU); err != nil {
		return err
	}
	reason := short.Reason()
	to, ok := inventory.Next(inventory.NoReservation, inventory.Reject)
	if !ok {
		return fmt.Errorf("transition table: no %s from a missing reservation", inventory.Reject)
	}
	if err := inventorydb.InsertReservation(ctx, s.Tx(), inventory.Reservation{OrderID: orderID, Status: to, Reason: reason, Version: 1}, 0); err != nil {
		return err
	}
	rejected := outbox.Event{AggregateID: orderID, AggregateVersion: 1, Type: events.InventoryRejected,
		Payload: events.InventoryRejectedV1{OrderID: orderID, Reason: inventory.ClipReason(reason)}}
	if err := s.Emit(ctx, rejected); err != nil {
		return err
	}
	log.InfoContext(ctx, "reservation rejected", "reason", reason)
	return nil
}

// lateCreate marks the reason of a marker row that a late create was seen.
const lateCreate = "late OrderCreated"

// createNotApplied handles an OrderCreated whose order id already has a
// reservation row: the reserve step already ran (a second event for the same
// order), or the cancel overtook the create. Nothing is held and nothing is
// emitted; a late create after a cancel is recorded on the marker row, and
// it closes the gap the cancel recorded: the missing event did arrive.
func (a *App) createNotApplied(ctx context.Context, tx *sqlx.Tx, log *slog.Logger, e events.Envelope, r inventory.Reservation) error {
	if r.Status != inventory.CancelledBeforeReserve {
		log.InfoContext(ctx, "order already has a reservation; nothing changed", "status", r.Status)
		return nil
	}
	if !strings.Contains(r.Reason, lateCreate) {
		note := fmt.Sprintf("%s; %s %s ignored, nothing reserved", r.Reason, lateCreate, e.EventID)
		if _, err := inventorydb.Note(ctx, tx, r.OrderID, r.Status, note); err != nil {
			return err
		}
	}
	resolution := fmt.Sprintf("late %s %s recorded as stale: cancel marker kept, nothing reserved", e.Type, e.EventID)
	resolved, err := inventorydb.ResolveGaps(ctx, tx, a.cfg.Consumer, r.OrderID, inventory.CreatedVersion, resolution)
	if err != nil {
		return err
	}
	log.WarnContext(ctx, "OrderCreated arrived after the order's cancel; recorded as stale, nothing reserved",
		"status", r.Status, "gaps_resolved", resolved)
	return nil
}

// OnOrderConfirmed turns the reservation into a sale: reserved -> committed,
// the held items leave on_hand and reserved. It emits no event. A
// reservation whose lease ran out is taken again or fails (confirmExpired).
func (a *App) OnOrderConfirmed(ctx context.Context, s Store, e events.Envelope) error {
	p, err := events.Decode[events.OrderConfirmedV1](e.Payload)
	if err != nil {
		return err
	}
	log := a.eventLog(s, e, p.OrderID)
	r, err := s.LockReservation(ctx, p.OrderID)
	if errors.Is(err, inventory.ErrNoReservation) {
		// The order is confirmed only after payment, which starts only from
		// the InventoryReserved that this service commits together with the
		// reservation. So a confirm without one is not a reordering that
		// waiting could fix (unlike a cancel, which may overtake the create):
		// it means lost state or a fault upstream. Park it as a dead letter,
		// visible and redrivable once the reservation exists, rather than
		// record a gap and guess; the dead letter is its recovery record.
		return inbox.Permanent(fmt.Errorf("%s for order %d, which has no reservation "+
			"(its InventoryReserved, which the confirm follows, was never committed here)", e.Type, p.OrderID))
	}
	if err != nil {
		return err
	}
	if r.Status == inventory.Expired {
		return a.confirmExpired(ctx, s, log, r)
	}
	return a.move(ctx, s, log, r, inventory.Confirm, "")
}

// confirmExpired is the late payment after the lease ran out (see the
// package comment of inventory): take every item again, all or none, with
// the conditional decrement of EffectTake in SKU order. If all are there the
// reservation becomes committed (no event, like any commit); if one is
// short, the takes before it are undone, the reservation becomes
// commit_failed and InventoryCommitFailed (next aggregate_version) tells the
// order to cancel and refund. Either way it is one decision under the
// reservation's row lock, so a redelivered or duplicate confirm finds a
// terminal or committed status and changes nothing.
func (a *App) confirmExpired(ctx context.Context, s Store, log *slog.Logger, r inventory.Reservation) error {
	tx := s.Tx()
	short, err := s.Take(ctx, r.Items)
	if err != nil {
		return err
	}
	trigger, reason, version := inventory.Confirm, "order confirmed after the lease expired: stock taken again", r.Version
	if short != nil {
		if short.Available, short.Known, err = inventorydb.Available(ctx, tx, short.SKU); err != nil {
			return err
		}
		trigger, reason, version = inventory.ConfirmShort, "order confirmed after the lease expired; "+short.Reason(), r.Version+1
	}
	to, ok := inventory.Next(r.Status, trigger)
	if !ok {
		return fmt.Errorf("transition table: no %s from %s", trigger, r.Status)
	}
	moved, err := inventorydb.Transition(ctx, tx, r.OrderID, r.Status, to, reason, version)
	if err != nil {
		return err
	}
	if !moved {
		return fmt.Errorf("reservation %d changed under its row lock", r.OrderID)
	}
	if to == inventory.CommitFailed {
		err := s.Emit(ctx, outbox.Event{AggregateID: r.OrderID, AggregateVersion: version,
			Type: events.InventoryCommitFailed, Payload: events.InventoryCommitFailedV1{OrderID: r.OrderID, Reason: inventory.ClipReason(reason)}})
		if err != nil {
			return err
		}
		log.WarnContext(ctx, "late confirm after the lease expired: stock gone, commit failed; the order must be cancelled and refunded",
			"reason", reason)
		return nil
	}
	log.InfoContext(ctx, "late confirm after the lease expired: stock taken again, committed", "items", len(r.Items))
	return nil
}

// OnOrderCancelled is the compensation: a reserved reservation is released,
// a committed one restocked. A rejected, released or restocked one changes
// nothing. With no reservation yet (the cancel overtook the create) there is
// nothing to undo, a "null compensation", but it leaves the reservation row
// as a marker in status cancelled_before_reserve: the late create then
// finds the order id taken and reserves nothing (the "hanging" protection).
// The marker lives in reservations rather than a table of its own because
// that row's primary key is exactly what the create must collide with.
func (a *App) OnOrderCancelled(ctx context.Context, s Store, e events.Envelope) error {
	p, err := events.Decode[events.OrderCancelledV1](e.Payload)
	if err != nil {
		return err
	}
	tx := s.Tx()
	log := a.eventLog(s, e, p.OrderID)
	reason := "order cancelled"
	if p.Reason != "" {
		reason += ": " + p.Reason
	}
	r, err := s.LockReservation(ctx, p.OrderID)
	if errors.Is(err, inventory.ErrNoReservation) {
		to, _ := inventory.Next(inventory.NoReservation, inventory.Cancel)
		marker := inventory.Reservation{OrderID: p.OrderID, Status: to, Version: 0,
			Reason: "cancelled before OrderCreated arrived (" + reason + ")"}
		err = inventorydb.InsertReservation(ctx, tx, marker, 0)
		if err == nil {
			log.WarnContext(ctx, "cancel arrived before create: nothing to release; marker left so a late create reserves nothing")
			return a.recordGap(ctx, tx, log, e)
		}
		if !errors.Is(err, inventorydb.ErrReservationExists) {
			return err
		}
		// A create committed its reservation since we looked: compensate it.
		r, err = inventorydb.LockReservation(ctx, tx, p.OrderID)
	}
	if err != nil {
		return err
	}
	if r.Status == inventory.Expired {
		reason += " (after the lease expired; its stock was released then)"
	}
	trigger := inventory.Cancel
	if p.AfterConfirm { // the sale happened, whether or not its confirm has arrived
		trigger = inventory.CancelSold
	}
	return a.move(ctx, s, log, r, trigger, reason)
}

// recordGap records, in the inbox transaction of e, that e arrived for an
// order whose OrderCreated (version 1) this consumer has not seen. Only an
// event that finds no reservation row reveals a gap here: inventory consumes
// a subset of the order's events, so a jump between the versions it does
// see (a cancel at version 3 after a create at 1) is not evidence of a loss,
// while the create is the first event of every order and always comes here.
func (a *App) recordGap(ctx context.Context, tx *sqlx.Tx, log *slog.Logger, e events.Envelope) error {
	g := inventory.Gap{Consumer: a.cfg.Consumer, OrderID: e.AggregateID, EventID: e.EventID, EventType: e.Type,
		ReceivedVersion: e.AggregateVersion, ExpectedVersion: inventory.CreatedVersion}
	added, err := inventorydb.InsertGap(ctx, tx, g, a.cfg.GapDeadline)
	if err != nil {
		return err
	}
	log.WarnContext(ctx, "event gap recorded: an earlier event of the order has not arrived",
		"expected_version", g.ExpectedVersion, "received_version", g.ReceivedVersion, "new", added, "deadline", a.cfg.GapDeadline)
	return nil
}

// move applies trigger t to the locked reservation r: it asks the domain
// where t leads, changes the status by compare-and-set on the status it
// read, then applies the move's stock effect to every held item in SKU
// order. A trigger that does not fit the status (a duplicate or stale
// event) is logged and changes nothing.
func (a *App) move(ctx context.Context, s Store, log *slog.Logger, r inventory.Reservation, t inventory.Trigger, reason string) error {
	to, ok := inventory.Next(r.Status, t)
	if !ok {
		log.InfoContext(ctx, "event does not fit the reservation's state; nothing changed", "status", r.Status, "trigger", t)
		return nil
	}
	moved, err := inventorydb.Transition(ctx, s.Tx(), r.OrderID, r.Status, to, reason, r.Version)
	if err != nil {
		return err
	}
	if !moved {
		// Impossible while we hold the row lock; treat as a retryable fault.
		return fmt.Errorf("reservation %d changed under its row lock", r.OrderID)
	}
	effect := inventory.Effect(r.Status, to)
	if err := s.Move(ctx, effect, r.Items); err != nil {
		err = fmt.Errorf("reservation %d %s -> %s: %w", r.OrderID, r.Status, to, err)
		if errors.Is(err, errDisagree) {
			// Retrying cannot make the tables agree.
			return inbox.Permanent(err)
		}
		return err
	}
	log.InfoContext(ctx, "reservation moved", "from", r.Status, "to", to, "stock_effect", effect, "items", len(r.Items))
	return nil
}
