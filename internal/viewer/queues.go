package viewer

import "github.com/relmsg/ordersaga/pkg/base/events"

// queueRoute is one saga queue: the consumer that reads it (its inbox key)
// and the routing keys bound to it. The page's step-through counts, at each
// step of an order, the order's messages published to a queue and not yet
// in its consumer's inbox (static/asof.js).
type queueRoute struct {
	Queue    string   `json:"queue"`
	Service  string   `json:"service"`
	Consumer string   `json:"consumer"`
	Keys     []string `json:"keys"`
}

// sagaQueues is the saga's topology as docs/contract.md ("Exchanges and
// queues") states it; each service's bindings package declares its part
// (TestQueuesFollowTheContract keeps the two together). The viewer is a
// client of the stack and cannot import the services' internal packages.
var sagaQueues = []queueRoute{
	{Queue: "order.saga-results", Service: "order", Consumer: "order", Keys: keys(
		events.InventoryReserved, events.InventoryRejected, events.InventoryReservationExpired,
		events.InventoryCommitFailed, events.PaymentSucceeded, events.PaymentFailed, events.PaymentRefunded)},
	{Queue: "inventory.order-events", Service: "inventory", Consumer: "inventory", Keys: keys(
		events.OrderCreated, events.OrderConfirmed, events.OrderCancelled)},
	{Queue: "payment.saga-events", Service: "payment", Consumer: "payment", Keys: keys(
		events.InventoryReserved, events.OrderCancelled)},
	{Queue: "payment.psp-commands", Service: "payment", Consumer: "payment-psp", Keys: keys(
		events.PaymentChargeRequested)},
	{Queue: "payment.refund-commands", Service: "payment", Consumer: "payment-refunds", Keys: keys(
		events.PaymentRefundRequested)},
}

func keys(types ...events.Type) []string {
	out := make([]string, len(types))
	for i, t := range types {
		out[i] = string(t)
	}
	return out
}
