// Package paymenttest builds, for tests, the events the payment service
// consumes from its peers, as they publish them: inventory.reserved (charge
// the order) and order.cancelled (undo what was charged).
package paymenttest

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/relmsg/ordersaga/pkg/base/events"
)

// Reserved is inventory's inventory.reserved for an order of one item of
// amount cents, in EUR: version 2 of the order's events.
func Reserved(orderID uint64, customer string, amount int64) events.Envelope {
	return envelope(events.InventoryReserved, orderID, 2, events.InventoryReservedV1{OrderID: orderID, CustomerID: customer,
		Items: []events.Item{{SKU: "SKU-1", Quantity: 1, UnitPriceCents: amount}}, AmountCents: amount, Currency: "EUR"})
}

// Cancelled is the order service's order.cancelled for an order, with the
// reason: version 3 of the order's events.
func Cancelled(orderID uint64, reason string) events.Envelope {
	return envelope(events.OrderCancelled, orderID, 3, events.OrderCancelledV1{OrderID: orderID, Reason: reason})
}

func envelope(typ string, orderID, version uint64, payload any) events.Envelope {
	body, err := json.Marshal(payload)
	if err != nil {
		panic(err) // a payload of this package's own types always encodes
	}
	return events.Envelope{EventID: uuid.NewString(), Type: typ, AggregateID: orderID, AggregateVersion: version,
		SchemaVersion: events.CurrentSchemaVersion, CorrelationID: strconv.FormatUint(orderID, 10),
		OccurredAt: time.Now().UTC(), Payload: body}
}
