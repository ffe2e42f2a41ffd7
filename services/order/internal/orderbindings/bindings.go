// Package orderbindings lists what the order service consumes: its queue, the
// routing keys bound to it, its consumer name and the handler of each event.
package orderbindings

import (
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox/batch"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/services/order/internal/orderapp"
)

// ConsumerName is the inbox key of the order service's consumer. Never
// rename it: every event it processed would look new.
const ConsumerName = "order"

// Queue receives the participants' results.
const Queue = "order.saga-results"

// Topology is what the order service declares on the broker.
func Topology(ns rabbit.Namespace) rabbit.Topology {
	return ns.Topology(rabbit.Queue{Name: Queue, Keys: []string{events.InventoryReserved, events.InventoryRejected,
		events.InventoryReservationExpired, events.InventoryCommitFailed, events.PaymentSucceeded, events.PaymentFailed,
		events.PaymentRefunded}})
}

// Handlers maps each consumed event type to its use case, written against
// orderapp.Store: run one event per transaction by the chapter's consumer,
// several by the batch layer (pkg/compose/process.ConsumeWith).
func Handlers(app *orderapp.App) batch.Handlers[orderapp.Store] {
	return batch.Handlers[orderapp.Store]{
		Direct:  orderapp.Direct,
		Batched: orderapp.Batched,
		Plain: map[events.Type]batch.Handler[orderapp.Store]{
			events.InventoryReserved: app.OnInventoryReserved,
			events.InventoryRejected: app.OnInventoryRejected,
			events.PaymentSucceeded:  app.OnPaymentSucceeded,
			events.PaymentFailed:     app.OnPaymentFailed,
			events.PaymentRefunded:   app.OnPaymentRefunded,

			events.InventoryReservationExpired: app.OnInventoryReservationExpired,
			events.InventoryCommitFailed:       app.OnInventoryCommitFailed,
		},
	}
}
