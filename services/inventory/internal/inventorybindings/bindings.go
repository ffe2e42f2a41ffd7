// Package inventorybindings lists what the inventory service consumes: its
// queue, the routing keys bound to it, its consumer name and the handler of
// each event.
package inventorybindings

import (
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox/batch"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventoryapp"
)

// ConsumerName is the inbox key of the inventory service's consumer. Never
// rename it: every event it processed would look new.
const ConsumerName = "inventory"

// Queue receives the order's lifecycle events.
const Queue = "inventory.order-events"

// Topology is what the inventory service declares on the broker.
func Topology(ns rabbit.Namespace) rabbit.Topology {
	return ns.Topology(rabbit.Queue{Name: Queue, Keys: []string{events.OrderCreated, events.OrderConfirmed, events.OrderCancelled}})
}

// Handlers maps each consumed event type to its use case. Each is a state
// transition (docs/contract.md, "Ordering"): a conditional update on the
// legal prior status, so an event that arrives out of order changes nothing
// it should not.
func Handlers(app *inventoryapp.App) batch.Handlers[inventoryapp.Store] {
	return batch.Handlers[inventoryapp.Store]{
		Direct:  inventoryapp.Direct,
		Batched: inventoryapp.Batched,
		Plain: app.WrongWays(map[events.Type]batch.Handler[inventoryapp.Store]{
			events.OrderCreated:   app.OnOrderCreated,
			events.OrderConfirmed: app.OnOrderConfirmed,
			events.OrderCancelled: app.OnOrderCancelled,
		}),
	}
}
