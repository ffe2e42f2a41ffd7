package inventorybindings

import (
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventoryapp"
)

// The lab's delta consumer, demo mode only: warehouse goods-received notes
// (inventoryapp.GoodsReceived), applied strictly in version order.

// ReceiptsConsumerName is the inbox key of the goods-received consumer.
const ReceiptsConsumerName = "inventory-receipts"

// ReceiptsQueue receives the warehouse's goods-received notes.
const ReceiptsQueue = "inventory.goods-received"

// DemoTopology is Topology plus the goods-received queue.
func DemoTopology(ns rabbit.Namespace) rabbit.Topology {
	t := Topology(ns)
	t.Queues = append(t.Queues, rabbit.Queue{Name: ns.Queue(ReceiptsQueue), Keys: []string{inventoryapp.GoodsReceived}})
	return t
}

// ReceiptHandlers maps the goods-received note to its use case.
func ReceiptHandlers(app *inventoryapp.App) map[events.Type]inbox.Handler {
	return map[events.Type]inbox.Handler{inventoryapp.GoodsReceived: app.OnGoodsReceived}
}
