// Package paymentamqp lists what the payment service consumes: its queues,
// the routing keys bound to each, the consumer names (inbox keys) and the
// handler of each event.
//
// Two consumers, on purpose. "payment" turns the saga's events into local
// decisions, in one transaction each, and never calls out. "payment-psp"
// consumes the payment service's own payment.charge-requested (written by
// "payment" into its outbox) and is the only one that calls the PSP. Its own
// queue keeps the slow, retried external calls from holding up the saga
// events, and its own consumer name keeps "charge requested" and "charged"
// two separately recorded steps.
package paymentamqp

import (
	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentapp"
)

// Consumer names are the inbox keys. Never rename them: every event they
// processed would look new.
const (
	SagaConsumer = "payment"     // saga events -> payments and charge requests
	PSPConsumer  = "payment-psp" // charge requests -> PSP calls and their outcomes
)

// Queues, one per consumer.
const (
	SagaQueue = "payment.saga-events"
	PSPQueue  = "payment.psp-commands"
)

// Topology is what the payment service declares on the broker.
func Topology(ns rabbit.Namespace) rabbit.Topology {
	return rabbit.Topology{
		Exchange:           ns.Exchange(),
		DeadLetterExchange: ns.DeadLetterExchange(),
		Queues: []rabbit.Queue{
			{Name: ns.Queue(SagaQueue), Keys: []string{events.InventoryReserved}},
			{Name: ns.Queue(PSPQueue), Keys: []string{events.PaymentChargeRequested}},
		},
	}
}

// SagaHandlers maps each saga event the "payment" consumer takes to its use
// case (run inside the inbox transaction).
func SagaHandlers(app *paymentapp.App) map[events.Type]inbox.Handler {
	return map[events.Type]inbox.Handler{
		events.InventoryReserved: app.OnInventoryReserved,
	}
}

// PSPHandlers maps the "payment-psp" consumer's events to their external
// handlers: the PSP call first, outside any transaction, then the recording
// of its outcome inside the inbox transaction.
func PSPHandlers(app *paymentapp.App) map[events.Type]inbox.ExternalHandler {
	return map[events.Type]inbox.ExternalHandler{
		events.PaymentChargeRequested: app.ChargeAtPSP,
	}
}
