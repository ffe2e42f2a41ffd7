package contract

import (
	"reflect"
	"testing"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/web"
	"github.com/relmsg/ordersaga/pkg/base/wire"
)

// TestTypesMatchTheDocument: every type of pkg/base/wire is its schema in
// docs/openapi.yaml, field by field (names, types, null, optional), and
// pkg/base/web's problem document is the Problem schema.
func TestTypesMatchTheDocument(t *testing.T) {
	for schema, v := range map[string]any{
		"Order": wire.Order{}, "OrderItem": wire.OrderItem{}, "OrderList": wire.OrderList{},
		"CreateOrderRequest": wire.CreateOrderRequest{}, "CancelOrderRequest": wire.CancelOrderRequest{},
		"CancelResult": wire.CancelResult{},
		"Stock":        wire.Stock{}, "StockList": wire.StockList{}, "ReceiptRequest": wire.ReceiptRequest{},
		"Reservation": wire.Reservation{}, "ReservationLine": wire.ReservationLine{},
		"Gap": wire.Gap{}, "GapList": wire.GapList{},
		"Payment": wire.Payment{}, "PaymentRefund": wire.PaymentRefund{}, "PaymentOutcome": wire.PaymentOutcome{},
		"NeedsAttention": wire.NeedsAttention{}, "RetryParkedResult": wire.RetryParkedResult{},
		"Charge": wire.Charge{}, "ChargeList": wire.ChargeList{}, "ChargeRequest": wire.ChargeRequest{},
		"PSPRefund": wire.PSPRefund{}, "PSPRefundList": wire.PSPRefundList{}, "RefundRequest": wire.RefundRequest{},
		"Switch": wire.Switch{}, "Health": wire.Health{},
		"Problem": web.Problem{},
	} {
		checkShape(t, "openapi", schema, v)
	}
}

// TestPayloadsMatchTheDocument: every payload struct of pkg/base/events is its
// message's payload schema in docs/asyncapi.yaml.
func TestPayloadsMatchTheDocument(t *testing.T) {
	for schema, v := range map[string]any{
		"OrderCreatedV1": events.OrderCreatedV1{}, "OrderConfirmedV1": events.OrderConfirmedV1{},
		"OrderCancelledV1": events.OrderCancelledV1{}, "InventoryReservedV1": events.InventoryReservedV1{},
		"InventoryRejectedV1": events.InventoryRejectedV1{}, "InventoryReservationExpiredV1": events.InventoryReservationExpiredV1{},
		"InventoryCommitFailedV1": events.InventoryCommitFailedV1{}, "PaymentChargeRequestedV1": events.PaymentChargeRequestedV1{},
		"PaymentSucceededV1": events.PaymentSucceededV1{}, "PaymentFailedV1": events.PaymentFailedV1{},
		"PaymentRefundRequestedV1": events.PaymentRefundRequestedV1{}, "PaymentRefundedV1": events.PaymentRefundedV1{},
		"Item": events.Item{},
	} {
		checkShape(t, "asyncapi", schema, v)
	}
}

// checkShape fails t for every difference between v's type and the
// schema of that name in the document doc.
func checkShape(t *testing.T, doc, schema string, v any) {
	t.Helper()
	diffs, err := ShapeMismatches(doc, schema, reflect.TypeOf(v))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Errorf("%s: %s", schema, d)
	}
}

// TestShapeMismatchesFindsADifference: the comparison is not vacuous.
func TestShapeMismatchesFindsADifference(t *testing.T) {
	type stock struct {
		SKU       string  `json:"sku"`
		OnHand    float64 `json:"on_hand"`
		Reserved  *int64  `json:"reserved"`
		Available int64   `json:"available,omitempty"`
		Location  string  `json:"location"`
	}
	diffs, err := ShapeMismatches("openapi", "Stock", reflect.TypeOf(stock{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 4 {
		t.Fatalf("got %d differences, want 4 (on_hand a number, reserved nullable, available optional, location unknown): %q", len(diffs), diffs)
	}
}
