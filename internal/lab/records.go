package lab

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/relmsg/ordersaga/pkg/base/wire"
)

// The domain calls: the services' records of an order (order, stock,
// reservation, payment, the PSP's charges and refunds), read through
// their APIs.

// The services' records, as their APIs write them (pkg/base/wire, held to
// docs/openapi.yaml).
type (
	// Order is an order as the API shows it.
	Order = wire.Order
	// Item is one order line, at the price the order was accepted at.
	Item = wire.OrderItem
	// Stock is one SKU's stock.
	Stock = wire.Stock
	// Reservation is an order's reservation ("" status when there is none).
	Reservation = wire.Reservation
	// Payment is an order's payment ("" status when there is none).
	Payment = wire.Payment
	// Charge is one charge in the PSP's books.
	Charge = wire.Charge
	// Refund is one refund in the PSP's books.
	Refund = wire.PSPRefund
)

func (l *Lab) createOrder(ctx context.Context, key, customer, sku string, qty int) (Order, int, http.Header, error) {
	var o Order
	body := wire.CreateOrderRequest{CustomerID: customer, Items: []wire.OrderLine{{SKU: sku, Quantity: qty}}}
	code, hdr, err := l.call(ctx, "order", http.MethodPost, "/orders", map[string]string{"Idempotency-Key": key}, body, &o)
	if err == nil && code == http.StatusAccepted {
		l.step(Step{Kind: StepOrder, OrderID: o.OrderID})
	}
	return o, code, hdr, err
}

// placeOrder creates an order for the lab's customer and fails unless the
// order service accepted it (202): for scenarios whose fault comes later.
func (l *Lab) placeOrder(ctx context.Context, key, sku string, qty int) (Order, error) {
	o, code, _, err := l.createOrder(ctx, key, "c-lab", sku, qty)
	if err != nil || code != http.StatusAccepted {
		return o, fmt.Errorf("create: %d %v", code, err)
	}
	return o, nil
}

func (l *Lab) order(ctx context.Context, id string) (Order, int, error) {
	var o Order
	code, _, err := l.call(ctx, "order", http.MethodGet, "/orders/"+id, nil, nil, &o)
	return o, code, err
}

func (l *Lab) waitOrder(ctx context.Context, id, status string) error {
	return l.waitFor(ctx, "order "+id+" to be "+status, func() (bool, error) {
		o, _, err := l.order(ctx, id)
		return o.Status == status, err
	})
}

// waitSettled waits until the order is confirmed and inventory has
// committed its reservation: the order's state and the stock numbers come
// from two services, and the second lags the first.
func (l *Lab) waitSettled(ctx context.Context, id string) error {
	if err := l.waitOrder(ctx, id, "confirmed"); err != nil {
		return err
	}
	return l.waitFor(ctx, "inventory to commit order "+id, func() (bool, error) {
		res, err := l.reservation(ctx, id)
		return res.Status == "committed", err
	})
}

func (l *Lab) lastOrderID(ctx context.Context) (uint64, error) {
	var list wire.OrderList
	if err := l.get(ctx, "order", "/orders?limit=1", &list); err != nil {
		return 0, err
	}
	if len(list.Orders) == 0 {
		return 0, nil
	}
	var id uint64
	_, err := fmt.Sscan(list.Orders[0].OrderID, &id)
	return id, err
}

func (l *Lab) stock(ctx context.Context, sku string) (Stock, error) {
	var s Stock
	return s, l.get(ctx, "inventory", "/stock/"+url.PathEscape(sku), &s)
}

func (l *Lab) reservation(ctx context.Context, id string) (Reservation, error) {
	return getOrNone[Reservation](ctx, l, "inventory", "/reservations/"+id)
}

func (l *Lab) payment(ctx context.Context, id string) (Payment, error) {
	return getOrNone[Payment](ctx, l, "payment", "/payments/"+id)
}

// getOrNone GETs a service's record; 404 means it has none, the zero T.
func getOrNone[T any](ctx context.Context, l *Lab, svc, path string) (T, error) {
	var v T
	code, _, err := l.call(ctx, svc, http.MethodGet, path, nil, nil, &v)
	if code == http.StatusNotFound {
		var none T
		return none, nil
	}
	return v, err
}

func (l *Lab) charges(ctx context.Context, id string) ([]Charge, error) {
	var c wire.ChargeList
	return c.Charges, l.get(ctx, "psp", "/psp/charges?order_ref="+url.QueryEscape(id), &c)
}

func (l *Lab) refunds(ctx context.Context, chargeID string) ([]Refund, error) {
	var f wire.PSPRefundList
	return f.Refunds, l.get(ctx, "psp", "/psp/refunds?charge_id="+url.QueryEscape(chargeID), &f)
}
