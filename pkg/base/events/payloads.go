package events

import (
	"errors"
	"fmt"
)

// Item is one order line. The unit price is the one the order was accepted
// at, so no consumer needs to look it up again.
type Item struct {
	SKU            string `json:"sku"`
	Quantity       int    `json:"quantity"`
	UnitPriceCents int64  `json:"unit_price_cents"`
}

func validateItems(items []Item) error {
	if len(items) == 0 {
		return errors.New("no items")
	}
	seen := map[string]bool{}
	for _, it := range items {
		if it.SKU == "" || it.Quantity <= 0 || it.UnitPriceCents < 0 {
			return fmt.Errorf("bad item %+v", it)
		}
		if seen[it.SKU] {
			return fmt.Errorf("duplicate sku %q", it.SKU)
		}
		seen[it.SKU] = true
	}
	return nil
}

func validateOrderID(id uint64) error {
	if id == 0 {
		return errors.New("order_id missing")
	}
	return nil
}

// OrderCreatedV1: an order was accepted and waits for inventory.
type OrderCreatedV1 struct {
	OrderID    uint64 `json:"order_id,string"`
	CustomerID string `json:"customer_id"`
	Items      []Item `json:"items"`
	TotalCents int64  `json:"total_cents"`
	Currency   string `json:"currency"`
}

func (e OrderCreatedV1) Validate() error {
	if err := validateOrderID(e.OrderID); err != nil {
		return err
	}
	if e.CustomerID == "" || e.Currency == "" || e.TotalCents <= 0 {
		return errors.New("customer_id, currency and total_cents are required")
	}
	return validateItems(e.Items)
}

// OrderConfirmedV1: the order was paid; inventory turns the reservation into
// a sale.
type OrderConfirmedV1 struct {
	OrderID uint64 `json:"order_id,string"`
}

func (e OrderConfirmedV1) Validate() error { return validateOrderID(e.OrderID) }

// OrderCancelledV1: the order will not complete; inventory releases what it
// reserved (or restocks what it sold) and payment refunds what it charged.
type OrderCancelledV1 struct {
	OrderID uint64 `json:"order_id,string"`
	Reason  string `json:"reason"`
	// AfterConfirm: the order was confirmed (paid, its sale committed)
	// before this cancel. Events of one order can arrive in another order
	// than they were written (two dispatcher workers, many consumer
	// workers), so inventory may see this cancel before the OrderConfirmed
	// it follows; the fact travels with the cancel so that inventory
	// restocks a sale instead of releasing a hold (去重解决不了乱序). Absent
	// (false) in events written before the field existed.
	AfterConfirm bool `json:"after_confirm,omitempty"`
}

func (e OrderCancelledV1) Validate() error { return validateOrderID(e.OrderID) }

// InventoryReservedV1: every item is reserved. It carries the amount to
// charge and the opaque customer id from OrderCreated so that payment needs
// nothing else.
type InventoryReservedV1 struct {
	OrderID     uint64 `json:"order_id,string"`
	CustomerID  string `json:"customer_id"`
	Items       []Item `json:"items"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

func (e InventoryReservedV1) Validate() error {
	if err := validateOrderID(e.OrderID); err != nil {
		return err
	}
	if e.CustomerID == "" || e.Currency == "" || e.AmountCents <= 0 {
		return errors.New("customer_id, currency and amount_cents are required")
	}
	return validateItems(e.Items)
}

// InventoryRejectedV1: nothing was reserved (all or none).
type InventoryRejectedV1 struct {
	OrderID uint64 `json:"order_id,string"`
	Reason  string `json:"reason"`
}

func (e InventoryRejectedV1) Validate() error { return validateOrderID(e.OrderID) }

// PaymentChargeRequestedV1 is the payment service's own command to call the
// PSP, carried by its outbox.
type PaymentChargeRequestedV1 struct {
	OrderID        uint64 `json:"order_id,string"`
	CustomerID     string `json:"customer_id"`
	AmountCents    int64  `json:"amount_cents"`
	Currency       string `json:"currency"`
	IdempotencyKey string `json:"idempotency_key"`
}

func (e PaymentChargeRequestedV1) Validate() error {
	if err := validateOrderID(e.OrderID); err != nil {
		return err
	}
	if e.IdempotencyKey == "" || e.AmountCents <= 0 || e.Currency == "" {
		return errors.New("idempotency_key, amount_cents and currency are required")
	}
	return nil
}

// PaymentSucceededV1: the PSP charged the amount.
type PaymentSucceededV1 struct {
	OrderID     uint64 `json:"order_id,string"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
	ChargeID    string `json:"charge_id"`
}

func (e PaymentSucceededV1) Validate() error { return validateOrderID(e.OrderID) }

// PaymentFailedV1: the PSP declined; nothing was charged.
type PaymentFailedV1 struct {
	OrderID uint64 `json:"order_id,string"`
	Reason  string `json:"reason"`
}

func (e PaymentFailedV1) Validate() error { return validateOrderID(e.OrderID) }

// PaymentRefundedV1: a charge was paid back.
type PaymentRefundedV1 struct {
	OrderID     uint64 `json:"order_id,string"`
	AmountCents int64  `json:"amount_cents"`
	RefundID    string `json:"refund_id"`
}

func (e PaymentRefundedV1) Validate() error { return validateOrderID(e.OrderID) }

// InventoryReservationExpiredV1: the reservation's lease ran out; the stock
// it held is available again.
type InventoryReservationExpiredV1 struct {
	OrderID uint64 `json:"order_id,string"`
	Reason  string `json:"reason"`
}

func (e InventoryReservationExpiredV1) Validate() error { return validateOrderID(e.OrderID) }

// InventoryCommitFailedV1: the order was confirmed after its reservation
// expired, and its stock could not be taken again.
type InventoryCommitFailedV1 struct {
	OrderID uint64 `json:"order_id,string"`
	Reason  string `json:"reason"`
}

func (e InventoryCommitFailedV1) Validate() error { return validateOrderID(e.OrderID) }

// PaymentRefundRequestedV1 is the payment service's own command to refund a
// charge at the PSP, carried by its outbox.
type PaymentRefundRequestedV1 struct {
	OrderID        uint64 `json:"order_id,string"`
	ChargeID       string `json:"charge_id"`
	AmountCents    int64  `json:"amount_cents"`
	IdempotencyKey string `json:"idempotency_key"`
}

func (e PaymentRefundRequestedV1) Validate() error {
	if err := validateOrderID(e.OrderID); err != nil {
		return err
	}
	if e.ChargeID == "" || e.IdempotencyKey == "" || e.AmountCents <= 0 {
		return errors.New("charge_id, idempotency_key and amount_cents are required")
	}
	return nil
}
