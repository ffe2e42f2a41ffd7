package paymentapp

import (
	"context"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentdb"
)

// OnInventoryReserved runs inside the inbox transaction of the "payment"
// consumer: stock is held, so the order is to be charged. It writes the
// pending payment (with the charge's idempotency key) and the
// payment.charge-requested event, version 1, in the same transaction. It
// does not call the PSP: that is the next message's job (ChargeAtPSP).
//
// An order that has a payment already (the same event from another
// publisher, a redriven copy with a new id) changes nothing: one order, one
// payment, one charge request.
func (a *App) OnInventoryReserved(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
	ev, err := events.Decode[events.InventoryReservedV1](e.Payload)
	if err != nil {
		return err
	}
	log := a.log.With("order_id", ev.OrderID, "event_id", e.EventID, "event_type", e.Type)
	p, err := payment.New(ev.OrderID, ev.CustomerID, ev.AmountCents, ev.Currency)
	if err != nil {
		// Retrying cannot make these facts chargeable: dead letter.
		return fmt.Errorf("%w: %w", events.ErrInvalid, err)
	}
	err = paymentdb.Insert(ctx, tx, p)
	if errors.Is(err, paymentdb.ErrExists) {
		existing, gerr := paymentdb.Get(ctx, tx, p.OrderID)
		if gerr != nil {
			return gerr
		}
		if existing.AmountCents != p.AmountCents || existing.Currency != p.Currency || existing.CustomerID != p.CustomerID {
			log.WarnContext(ctx, "inventory.reserved disagrees with the payment already recorded; kept the recorded one",
				"recorded_amount_cents", existing.AmountCents, "event_amount_cents", p.AmountCents,
				"recorded_currency", existing.Currency, "event_currency", p.Currency)
		} else {
			log.InfoContext(ctx, "payment exists already; nothing to do", "status", existing.Status)
		}
		return nil
	}
	if err != nil {
		return err
	}
	_, err = outbox.Add(ctx, tx, outbox.Event{
		AggregateID: p.OrderID, AggregateVersion: p.Version, Type: events.PaymentChargeRequested,
		Payload: events.PaymentChargeRequestedV1{OrderID: p.OrderID, CustomerID: p.CustomerID,
			AmountCents: p.AmountCents, Currency: p.Currency, IdempotencyKey: p.IdempotencyKey},
	})
	if err != nil {
		return err
	}
	log.InfoContext(ctx, "payment pending; charge requested", "amount_cents", p.AmountCents,
		"currency", p.Currency, "idempotency_key", p.IdempotencyKey)
	return nil
}
