package orderapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
)

// The handlers below run inside the inbox transaction (pkg/inbox), through
// its Store: the inbox row, the order's state change and the events it
// emits commit together. Each moves the order only along the transition table; an event
// that does not fit the order's current state (a stale or out-of-order
// result) is recorded in the log and changes nothing.

// onResult decodes a result event's payload as P and applies trigger t to
// the order it names, with the reason it gives ("": none); fields reads
// both from the payload.
func onResult[P interface{ Validate() error }](ctx context.Context, a *App, s Store, e events.Envelope, t order.Trigger,
	fields func(P) (orderID uint64, reason string)) error {
	p, err := events.Decode[P](e.Payload)
	if err != nil {
		return err
	}
	orderID, reason := fields(p)
	return a.apply(ctx, s, e, orderID, t, reason)
}

// OnInventoryReserved: stock is held; wait for payment.
func (a *App) OnInventoryReserved(ctx context.Context, s Store, e events.Envelope) error {
	return onResult(ctx, a, s, e, order.InventoryReserved, func(p events.InventoryReservedV1) (uint64, string) { return p.OrderID, "" })
}

// OnInventoryRejected: nothing was reserved; the order ends rejected and
// there is nothing to compensate.
func (a *App) OnInventoryRejected(ctx context.Context, s Store, e events.Envelope) error {
	return onResult(ctx, a, s, e, order.InventoryRejected, func(p events.InventoryRejectedV1) (uint64, string) {
		return p.OrderID, p.Reason
	})
}

// OnPaymentSucceeded: the order is confirmed and inventory is told to turn
// the reservation into a sale.
func (a *App) OnPaymentSucceeded(ctx context.Context, s Store, e events.Envelope) error {
	return onResult(ctx, a, s, e, order.PaymentSucceeded, func(p events.PaymentSucceededV1) (uint64, string) { return p.OrderID, "" })
}

// OnPaymentFailed: the charge was declined; the order is cancelled and
// inventory releases the reservation (the compensation).
func (a *App) OnPaymentFailed(ctx context.Context, s Store, e events.Envelope) error {
	return onResult(ctx, a, s, e, order.PaymentFailed, func(p events.PaymentFailedV1) (uint64, string) {
		return p.OrderID, "payment failed: " + p.Reason
	})
}

// OnInventoryCommitFailed: the order was paid after its reservation had
// expired and the stock was gone. The order is cancelled and, because it
// was paid, its refund is pending: payment refunds on OrderCancelled.
func (a *App) OnInventoryCommitFailed(ctx context.Context, s Store, e events.Envelope) error {
	return onResult(ctx, a, s, e, order.InventoryCommitFailed, func(p events.InventoryCommitFailedV1) (uint64, string) {
		return p.OrderID, "stock gone after the reservation expired: " + p.Reason
	})
}

// OnInventoryReservationExpired is recorded only: the order keeps waiting
// for its payment. If the payment succeeds, inventory takes the stock
// again when it sees OrderConfirmed, or reports commit-failed; if it
// fails, the cancel finds the reservation already released.
func (a *App) OnInventoryReservationExpired(ctx context.Context, s Store, e events.Envelope) error {
	p, err := events.Decode[events.InventoryReservationExpiredV1](e.Payload)
	if err != nil {
		return err
	}
	s.Log(a.log).InfoContext(ctx, "reservation expired while the order waits for its payment", "order_id", p.OrderID,
		"event_id", e.EventID, "reason", p.Reason)
	return nil
}

// OnPaymentRefunded: the money of a cancelled order is back.
func (a *App) OnPaymentRefunded(ctx context.Context, s Store, e events.Envelope) error {
	return onResult(ctx, a, s, e, order.PaymentRefunded, func(p events.PaymentRefundedV1) (uint64, string) { return p.OrderID, "" })
}

// emits says which event a move by trigger t writes: the confirm tells
// inventory to commit the sale; every cancel tells inventory to release (or
// restock) and payment to refund what it charged. The consumers, the
// cancel, the deadline sweep and the reconciler all use it, so a move
// emits the same event whoever makes it.
func emits(t order.Trigger, reason string) func(order.Order) (events.Type, any) {
	switch t {
	case order.PaymentSucceeded:
		return func(o order.Order) (events.Type, any) {
			return events.OrderConfirmed, events.OrderConfirmedV1{OrderID: o.ID}
		}
	case order.PaymentFailed, order.CancelRequested, order.InventoryCommitFailed:
		return func(o order.Order) (events.Type, any) {
			// o is the order before the move: a cancel of a confirmed
			// order says so (inventory restocks the sale even when this
			// event overtakes the OrderConfirmed).
			return events.OrderCancelled, events.OrderCancelledV1{OrderID: o.ID, Reason: reason,
				AfterConfirm: o.Status == order.Confirmed}
		}
	}
	return nil
}

// Who changes an order, as order_history records it.
const (
	ActorAPI        = "api"        // a client's request (create, cancel)
	ActorConsumer   = "consumer"   // a consumed result event
	ActorDeadline   = "deadline"   // the deadline sweep
	ActorReconciler = "reconciler" // a reconciler repair
)

// TriggerCreated is the trigger name of an order's first history row.
const TriggerCreated = "created"

// cause says who made a change and because of what, for order_history.
type cause struct {
	actor    string
	eventID  string // the consumed event (consumer)
	repairID string // the reconciler's audit row
}

// apply locks the order and runs the trigger on it.
func (a *App) apply(ctx context.Context, s Store, e events.Envelope, orderID uint64, t order.Trigger, reason string) error {
	log := s.Log(a.log).With("order_id", orderID, "event_id", e.EventID, "event_type", e.Type)
	o, err := s.LockOrder(ctx, orderID)
	if errors.Is(err, order.ErrNotFound) {
		return inbox.Permanent(fmt.Errorf("%s for unknown order %d", e.Type, orderID))
	}
	if err != nil {
		return err
	}
	changed, err := a.decide(ctx, s, log, o, t, reason, cause{actor: ActorConsumer, eventID: e.EventID})
	if err == nil && !changed {
		log.WarnContext(ctx, "event does not fit the order's state; ignored", "status", o.Status, "trigger", t)
	}
	return err
}

// decide asks the domain where the trigger leads from the locked order o,
// and stores the move (compare-and-set on the status it read) with its
// refund status, the deadline of the new status, the event it emits, if
// any, numbered with the order's next aggregate version, and its
// order_history row. It reports whether anything changed.
func (a *App) decide(ctx context.Context, s Store, log *slog.Logger, o order.Order, t order.Trigger, reason string,
	c cause) (bool, error) {
	to, moves := order.Next(o.Status, t)
	refund := order.Refund(o.Status, o.RefundStatus, t)
	emit := emits(t, reason)
	if !moves {
		if refund == o.RefundStatus {
			return false, nil
		}
		// No move, but money to return or returned (a payment that
		// succeeded after the cancel, or its refund).
		to, reason, emit = o.Status, o.StatusReason, nil
	}
	version := o.Version
	var out *outbox.Event
	if emit != nil {
		version++
		typ, payload := emit(o)
		id, err := outbox.NewEventID()
		if err != nil {
			return false, err
		}
		out = &outbox.Event{EventID: id, AggregateID: o.ID, AggregateVersion: version, Type: typ, Payload: payload}
	}
	moved, err := orderdb.Transition(ctx, s.Tx(), o.ID, o.Status, to, refund, reason, version, a.cfg.Deadlines.For(to))
	if err != nil {
		return false, err
	}
	if !moved {
		// Impossible while we hold the row lock; treat as a retryable fault.
		return false, fmt.Errorf("order %d changed under its row lock", o.ID)
	}
	// order_history, then the outbox row: the order of the timeline (in a
	// consumer batch both wait for the batch's end, in that order: Store).
	change := orderdb.Change{OrderID: o.ID, From: string(o.Status), To: string(to), RefundStatus: string(refund),
		Trigger: string(t), Actor: c.actor, Reason: reason, EventID: nullable(c.eventID), RepairID: nullable(c.repairID)}
	if out != nil {
		change.EmittedEventID = &out.EventID
	}
	if err := s.RecordChange(ctx, change); err != nil {
		return false, err
	}
	if out != nil {
		if err := s.Emit(ctx, *out); err != nil {
			return false, err
		}
	}
	log.InfoContext(ctx, "order moved", "from", o.Status, "to", to, "refund_status", refund, "trigger", t, "actor", c.actor)
	return true, nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
