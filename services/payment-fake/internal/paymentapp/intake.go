package paymentapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentdb"
)

// OnInventoryReserved runs inside the inbox transaction of the "payment"
// consumer: stock is held, so the order is to be charged. It writes the
// pending payment (with the charge's idempotency key and its deadline) and
// the payment.charge-requested event, version 1, in the same transaction.
// It does not call the PSP: that is the next message's job (ChargeAtPSP).
//
// An order that has a payment already (the same event from another
// publisher, a redriven copy with a new id) changes nothing: one order, one
// payment, one charge request. An order whose cancel arrived first has a
// marker row instead: the late event is recorded on it as stale and
// charges nothing (the saga's "hanging" protection).
func (a *App) OnInventoryReserved(ctx context.Context, s Store, e events.Envelope) error {
	ev, err := events.Decode[events.InventoryReservedV1](e.Payload)
	if err != nil {
		return err
	}
	tx := s.Tx()
	log := s.Log(a.log).With("order_id", ev.OrderID, "event_id", e.EventID, "event_type", e.Type)
	p, err := payment.New(ev.OrderID, ev.CustomerID, ev.AmountCents, ev.Currency)
	if err != nil {
		// Retrying cannot make these facts chargeable: dead letter.
		return fmt.Errorf("%w: %w", events.ErrInvalid, err)
	}
	// The request's id is kept on the payment: a later request corrects it.
	if p.RequestEventID, err = outbox.NewEventID(); err != nil {
		return err
	}
	err = paymentdb.Insert(ctx, tx, p, a.cfg.ChargeDeadline, a.cfg.Grace)
	if errors.Is(err, paymentdb.ErrExists) {
		existing, gerr := paymentdb.Lock(ctx, tx, p.OrderID)
		if gerr != nil {
			return gerr
		}
		return a.reservedNotApplied(ctx, tx, log, e, p, existing)
	}
	if err != nil {
		return err
	}
	if err := s.Emit(ctx, chargeEvent(p, p.Version)); err != nil {
		return err
	}
	log.InfoContext(ctx, "payment pending; charge requested", "amount_cents", p.AmountCents,
		"currency", p.Currency, "idempotency_key", p.IdempotencyKey)
	return nil
}

// lateReserved marks a cancel marker on which a late inventory.reserved
// was recorded.
const lateReserved = "late inventory.reserved"

// reservedNotApplied handles an inventory.reserved for an order that has a
// row already: a payment (nothing to do) or the marker of a cancel that
// overtook it (recorded as stale on the marker, nothing charged).
func (a *App) reservedNotApplied(ctx context.Context, tx *sqlx.Tx, log *slog.Logger, e events.Envelope, want, existing payment.Payment) error {
	if existing.IsMarker() {
		if !strings.Contains(existing.CancelReason, lateReserved) {
			note := fmt.Sprintf("%s; %s %s ignored, nothing charged", existing.CancelReason, lateReserved, e.EventID)
			if _, err := paymentdb.NoteCancel(ctx, tx, existing.OrderID, existing.Status, note); err != nil {
				return err
			}
		}
		log.WarnContext(ctx, "inventory.reserved arrived after the order's cancel; recorded as stale, nothing charged",
			"status", existing.Status, "amount_cents", want.AmountCents)
		return nil
	}
	if existing.AmountCents != want.AmountCents || existing.Currency != want.Currency || existing.CustomerID != want.CustomerID {
		log.WarnContext(ctx, "inventory.reserved disagrees with the payment already recorded; kept the recorded one",
			"recorded_amount_cents", existing.AmountCents, "event_amount_cents", want.AmountCents,
			"recorded_currency", existing.Currency, "event_currency", want.Currency)
		return nil
	}
	log.InfoContext(ctx, "payment exists already; nothing to do", "status", existing.Status)
	return nil
}
