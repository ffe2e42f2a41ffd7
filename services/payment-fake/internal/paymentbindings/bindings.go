// Package paymentbindings lists what the payment service consumes: its queues,
// the routing keys bound to each, the consumer names (inbox keys) and the
// handler of each event.
//
// Three consumers, on purpose. "payment" turns the saga's events into local
// decisions, in one transaction each, and never calls out. "payment-psp"
// consumes the payment service's own payment.charge-requested (written by
// "payment" into its outbox, or by the sweep) and is the only one that
// charges at the PSP; "payment-refunds" does the same for
// payment.refund-requested and the PSP's refunds. Their own queues keep the
// slow, retried external calls from holding up the saga events, and their
// own consumer names keep "requested" and "done" separately recorded steps.
package paymentbindings

import (
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox/batch"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentapp"
)

// Consumer names are the inbox keys. Never rename them: every event they
// processed would look new.
const (
	SagaConsumer   = "payment"         // saga events -> payments, cancels, charge and refund requests
	PSPConsumer    = "payment-psp"     // charge requests -> PSP charges and their outcomes
	RefundConsumer = "payment-refunds" // refund requests -> PSP refunds and their outcomes
)

// Queues, one per consumer.
const (
	SagaQueue   = "payment.saga-events"
	PSPQueue    = "payment.psp-commands"
	RefundQueue = "payment.refund-commands"
)

// Topology is what the payment service declares on the broker.
func Topology(ns rabbit.Namespace) rabbit.Topology {
	return ns.Topology(
		rabbit.Queue{Name: SagaQueue, Keys: []string{events.InventoryReserved, events.OrderCancelled}},
		rabbit.Queue{Name: PSPQueue, Keys: []string{events.PaymentChargeRequested}},
		rabbit.Queue{Name: RefundQueue, Keys: []string{events.PaymentRefundRequested}},
	)
}

// SagaHandlers maps each saga event the "payment" consumer takes to its use
// case (run inside the inbox transaction, through paymentapp.Store).
func SagaHandlers(app *paymentapp.App) batch.Handlers[paymentapp.Store] {
	return batch.Handlers[paymentapp.Store]{Direct: paymentapp.Direct, Batched: paymentapp.Batched,
		Plain: map[events.Type]batch.Handler[paymentapp.Store]{
			events.InventoryReserved: app.OnInventoryReserved,
			events.OrderCancelled:    app.OnOrderCancelled,
		}}
}

// PSPHandlers maps the "payment-psp" consumer's events to their external
// handlers: the PSP call first, outside any transaction, then the recording
// of its outcome inside the inbox transaction.
func PSPHandlers(app *paymentapp.App) batch.Handlers[paymentapp.Store] {
	return batch.Handlers[paymentapp.Store]{Direct: paymentapp.Direct, Batched: paymentapp.Batched,
		External: map[events.Type]batch.ExternalHandler[paymentapp.Store]{
			events.PaymentChargeRequested: app.ChargeAtPSP,
		}}
}

// RefundHandlers maps the "payment-refunds" consumer's events to their
// external handlers, like PSPHandlers.
func RefundHandlers(app *paymentapp.App) batch.Handlers[paymentapp.Store] {
	return batch.Handlers[paymentapp.Store]{Direct: paymentapp.Direct, Batched: paymentapp.Batched,
		External: map[events.Type]batch.ExternalHandler[paymentapp.Store]{
			events.PaymentRefundRequested: app.RefundAtPSP,
		}}
}
