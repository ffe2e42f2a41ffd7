package inventoryapp

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorydb"
)

// The lab's delta event (demo mode only; inventorybindings.DemoTopology
// binds it). No event of the saga is a delta: each moves an aggregate
// between states. A warehouse's goods-received note is one: "n more of
// this SKU on hand", numbered per inbound shipment (aggregate_id, versions
// 1, 2, ...), so a note must never be applied before the notes ahead of it
// nor skipped (去重解决不了乱序: 增量事件不能跳过缺失版本直接应用). Its
// consumer runs it through pkg/ordering's delta strategy: a note ahead of a
// gap is parked until the gap fills, and alerted on after PARK_DEADLINE.
// The lab's delta-parking and delta-overdue experiments publish these
// notes as the warehouse would.

// GoodsReceived is the event type. Its first segment, "warehouse", is the
// aggregate type its versions are counted under.
const GoodsReceived events.Type = "warehouse.goods-received"

func init() { events.Register(GoodsReceived, []int{1}, events.Delta) }

// GoodsReceivedV1 is a goods-received note: quantity more of sku on hand.
type GoodsReceivedV1 struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// Validate checks a note as POST /stock/{sku}/receipts checks a receipt.
func (p GoodsReceivedV1) Validate() error {
	if !inventory.ValidSKU(p.SKU) {
		return fmt.Errorf("bad sku %q", p.SKU)
	}
	return inventory.ValidateReceipt(p.Quantity)
}

// OnGoodsReceived books one note, inside the inbox transaction, in version
// order (the consumer's Sequencer decides when it runs). A note for an
// unknown SKU, or one that would pass inventory.MaxOnHand, can never be
// booked: a dead letter.
func (a *App) OnGoodsReceived(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
	p, err := events.Decode[GoodsReceivedV1](e.Payload)
	if err != nil {
		return err
	}
	ok, err := inventorydb.Receive(ctx, tx, p.SKU, p.Quantity)
	if err != nil {
		return err
	}
	if !ok {
		return inbox.Permanent(fmt.Errorf("%w: goods received for %s: unknown SKU or on_hand past %d", inventory.ErrInvalid, p.SKU, inventory.MaxOnHand))
	}
	a.log.InfoContext(ctx, "goods received", "sku", p.SKU, "quantity", p.Quantity,
		"shipment", e.AggregateID, "version", e.AggregateVersion, "event_id", e.EventID)
	return nil
}
