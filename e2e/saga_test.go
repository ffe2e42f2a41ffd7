// Package e2e runs the whole saga: the three services in-process, each on
// its own database, talking through the real RabbitMQ. The assertions are
// what a user would check: order state, stock numbers, reservation and
// payment records, the PSP's charge count, and the events in the outboxes.
package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/sagatest"
	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/wire"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

// The services' answers, as pkg/base/wire declares them for every client.
type (
	orderJSON       = wire.Order
	stockJSON       = wire.Stock
	reservationJSON = wire.Reservation
	paymentJSON     = wire.Payment
	chargesJSON     = wire.ChargeList
)

func createOrder(t *testing.T, s *sagatest.Saga, key, customer, sku string, qty int) orderJSON {
	t.Helper()
	var o orderJSON
	body := map[string]any{"customer_id": customer, "items": []map[string]any{{"sku": sku, "quantity": qty}}}
	if code := s.Order.Do("POST", "/orders", map[string]string{"Idempotency-Key": key}, body, &o); code != 202 {
		t.Fatalf("POST /orders: %d", code)
	}
	if o.Status != "pending_inventory" {
		t.Fatalf("created order status %q, want pending_inventory (accepted, not done)", o.Status)
	}
	return o
}

// createHeld creates an order for customer c-1 and waits until the
// payment service holds it at the pause point (one hit), which the caller
// releases through the returned gate.
func createHeld(t *testing.T, s *sagatest.Saga, point, key, sku string, qty int) (orderJSON, *failpoint.Gate) {
	t.Helper()
	gate := s.Payment.Failpoints.Pause(point, 1)
	o := createOrder(t, s, key, "c-1", sku, qty)
	select {
	case <-gate.Reached():
	case <-time.After(30 * time.Second):
		t.Fatalf("order %s never reached %s", o.OrderID, point)
	}
	return o, gate
}

func waitStatus(t *testing.T, s *sagatest.Saga, id, want string) orderJSON {
	t.Helper()
	var o orderJSON
	sagatest.Eventually(t, 30*time.Second, "order "+id+" to reach "+want, func() bool {
		s.Order.Do("GET", "/orders/"+id, nil, nil, &o)
		return o.Status == want
	})
	return o
}

// waitFailed waits until the order is in status want, an end that is not
// a sale, and fails the test unless the order says why.
func waitFailed(t *testing.T, s *sagatest.Saga, id, want string) {
	t.Helper()
	if o := waitStatus(t, s, id, want); o.StatusReason == "" {
		t.Fatalf("%s order %s has no reason", want, id)
	}
}

// waitReservation waits until inventory's reservation of the order is in
// status want.
func waitReservation(t *testing.T, s *sagatest.Saga, orderID, want string) {
	t.Helper()
	sagatest.Eventually(t, 15*time.Second, "reservation "+orderID+" to be "+want, func() bool {
		var r reservationJSON
		s.Inventory.Do("GET", "/reservations/"+orderID, nil, nil, &r)
		return r.Status == want
	})
}

func stock(t *testing.T, s *sagatest.Saga, sku string) stockJSON {
	t.Helper()
	var st stockJSON
	if code := s.Inventory.Do("GET", "/stock/"+sku, nil, nil, &st); code != 200 {
		t.Fatalf("GET /stock/%s: %d", sku, code)
	}
	return st
}

func charges(t *testing.T, s *sagatest.Saga, orderID string) chargesJSON {
	t.Helper()
	var c chargesJSON
	if code := s.Payment.Do("GET", "/psp/charges?order_ref="+orderID, nil, nil, &c); code != 200 {
		t.Fatalf("GET /psp/charges: %d", code)
	}
	return c
}

// outboxTypes lists a service's outbox events for one order as "type/status".
func outboxTypes(t *testing.T, svc *sagatest.Service, orderID string) []string {
	t.Helper()
	var rows []struct {
		Type   string `db:"event_type"`
		Status string `db:"status"`
	}
	if err := svc.DB.Select(&rows, `SELECT event_type, status FROM outbox_events WHERE aggregate_id = ? ORDER BY aggregate_version`, orderID); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rows {
		out = append(out, r.Type+"/"+r.Status)
	}
	return out
}

func inboxCount(t *testing.T, svc *sagatest.Service) int {
	t.Helper()
	var n int
	if err := svc.DB.Get(&n, `SELECT COUNT(*) FROM consumer_inbox`); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSagaHappyPathConfirms(t *testing.T) {
	t.Parallel()
	s := sagatest.Start(t)
	before := stock(t, s, "SKU-1")
	o := createOrder(t, s, "happy-1", "c-1", "SKU-1", 2)
	waitStatus(t, s, o.OrderID, "confirmed")

	// Stock: two keyboards sold; the reservation became a sale.
	waitReservation(t, s, o.OrderID, "committed")
	after := stock(t, s, "SKU-1")
	if after.OnHand != before.OnHand-2 || after.Reserved != 0 {
		t.Fatalf("stock after confirm: %+v, want on_hand %d and nothing reserved", after, before.OnHand-2)
	}
	var p paymentJSON
	s.Payment.Do("GET", "/payments/"+o.OrderID, nil, nil, &p)
	if p.Status != "succeeded" || p.AmountCents != 17800 || p.PSPChargeID == "" {
		t.Fatalf("payment = %+v, want succeeded for 17800 with a charge id", p)
	}
	c := charges(t, s, o.OrderID)
	if len(c.Charges) != 1 || c.Charges[0].Status != "succeeded" || c.Charges[0].AmountCents != 17800 {
		t.Fatalf("PSP charges = %+v, want exactly one succeeded charge of 17800", c.Charges)
	}
	sagatest.Eventually(t, 10*time.Second, "every outbox event to be sent", func() bool {
		return fmt.Sprint(outboxTypes(t, s.Order, o.OrderID)) == "[order.created/sent order.confirmed/sent]" &&
			fmt.Sprint(outboxTypes(t, s.Inventory, o.OrderID)) == "[inventory.reserved/sent]" &&
			fmt.Sprint(outboxTypes(t, s.Payment, o.OrderID)) == "[payment.charge-requested/sent payment.succeeded/sent]"
	})
	// Each consumer processed each of its events once: order (reserved,
	// succeeded), inventory (created, confirmed), payment (reserved,
	// charge-requested).
	if o, i, p := inboxCount(t, s.Order), inboxCount(t, s.Inventory), inboxCount(t, s.Payment); o != 2 || i != 2 || p != 2 {
		t.Fatalf("inbox rows order=%d inventory=%d payment=%d, want 2 each", o, i, p)
	}
	// On the same stack, docs/walkthrough.md's tour: every request and
	// answer of it held to docs/openapi.yaml, every message to asyncapi.yaml.
	t.Run("walkthrough", func(t *testing.T) { replayWalkthrough(t, s) })
}

func TestSagaInsufficientStockRejects(t *testing.T) {
	t.Parallel()
	s := sagatest.Start(t)
	before := stock(t, s, "SKU-LIMITED")
	o := createOrder(t, s, "short-1", "c-1", "SKU-LIMITED", 2)
	waitFailed(t, s, o.OrderID, "rejected")
	if after := stock(t, s, "SKU-LIMITED"); after != before {
		t.Fatalf("stock changed by a rejected order: %+v -> %+v", before, after)
	}
	var r reservationJSON
	s.Inventory.Do("GET", "/reservations/"+o.OrderID, nil, nil, &r)
	if r.Status != "rejected" {
		t.Fatalf("reservation = %+v, want rejected", r)
	}
	if code := s.Payment.Do("GET", "/payments/"+o.OrderID, nil, nil, nil); code != 404 {
		t.Fatalf("GET /payments for a rejected order: %d, want 404 (nothing charged)", code)
	}
	if c := charges(t, s, o.OrderID); len(c.Charges) != 0 {
		t.Fatalf("PSP charges = %+v, want none", c.Charges)
	}
}

func TestSagaPaymentDeclinedCancelsAndReleases(t *testing.T) {
	t.Parallel()
	s := sagatest.Start(t)
	before := stock(t, s, "SKU-3")
	o := createOrder(t, s, "declined-1", "decline-1", "SKU-3", 3)
	waitFailed(t, s, o.OrderID, "cancelled")
	waitReservation(t, s, o.OrderID, "released")
	if after := stock(t, s, "SKU-3"); after != before {
		t.Fatalf("stock after the release: %+v, want it back to %+v", after, before)
	}
	var p paymentJSON
	s.Payment.Do("GET", "/payments/"+o.OrderID, nil, nil, &p)
	if p.Status != "failed" || p.FailureReason == "" {
		t.Fatalf("payment = %+v, want failed with a reason", p)
	}
	if c := charges(t, s, o.OrderID); len(c.Charges) != 1 || c.Charges[0].Status != "declined" {
		t.Fatalf("PSP charges = %+v, want one declined charge", c.Charges)
	}
}

// Twenty concurrent POSTs with one key: one order, one OrderCreated, one
// charge, confirmed once. Each caller gets the order (202, created or
// replayed) or, while the first request with the key is still being
// processed, 409 idempotency-key-in-flight (the IETF draft); a retry after
// that gets the order.
func TestConcurrentCreatesWithOneKeyEndToEnd(t *testing.T) {
	t.Parallel()
	s := sagatest.Start(t)
	const n = 20
	ids := make([]string, n)
	codes := make([]int, n)
	body := map[string]any{"customer_id": "c-7", "items": []map[string]any{{"sku": "SKU-2", "quantity": 1}}}
	testutil.Together(n, func(i int) {
		var o map[string]any // an order, or a problem document
		codes[i] = s.Order.Do("POST", "/orders", map[string]string{"Idempotency-Key": "one-key"}, body, &o)
		switch typ, _ := o["type"].(string); {
		case codes[i] == 202:
			ids[i], _ = o["order_id"].(string)
		case codes[i] != 409 || !strings.HasSuffix(typ, "#problem-idempotency-key-in-flight"):
			t.Errorf("POST %d: %d %v, want 202 or 409 idempotency-key-in-flight", i, codes[i], o)
		}
	})
	var first string
	for i := range ids {
		switch {
		case ids[i] == "":
		case first == "":
			first = ids[i]
		case ids[i] != first:
			t.Fatalf("caller %d got order %q, another %q", i, ids[i], first)
		}
	}
	var again orderJSON
	if code := s.Order.Do("POST", "/orders", map[string]string{"Idempotency-Key": "one-key"}, body, &again); code != 202 ||
		(first != "" && again.OrderID != first) {
		t.Fatalf("the retry after them: %d order %q, want 202 and order %q (codes %v)", code, again.OrderID, first, codes)
	}
	ids[0] = again.OrderID
	waitStatus(t, s, ids[0], "confirmed")
	var orders, created int
	s.Order.DB.Get(&orders, `SELECT COUNT(*) FROM orders`)
	s.Order.DB.Get(&created, `SELECT COUNT(*) FROM outbox_events WHERE event_type = 'order.created'`)
	if orders != 1 || created != 1 {
		t.Fatalf("orders=%d order.created events=%d, want 1 and 1", orders, created)
	}
	if c := charges(t, s, ids[0]); len(c.Charges) != 1 {
		t.Fatalf("PSP charges = %d, want 1", len(c.Charges))
	}
}

// The broker closes every connection of the three services (as a broker
// restart or an operator would). They reconnect with backoff, redeclare
// their topology and resume consuming and dispatching: an order placed
// right after the cut still completes, with one charge.
func TestSagaSurvivesBrokerConnectionLoss(t *testing.T) {
	t.Parallel()
	s := sagatest.Start(t)
	first := createOrder(t, s, "before-cut", "c-1", "SKU-4", 1)
	waitStatus(t, s, first.OrderID, "confirmed")

	if n := rabbittest.CloseConnections(t, string(s.NS)); n < 3 {
		t.Fatalf("closed %d connections, want at least one per service", n)
	}
	second := createOrder(t, s, "after-cut", "c-1", "SKU-4", 2)
	waitStatus(t, s, second.OrderID, "confirmed")
	if c := charges(t, s, second.OrderID); len(c.Charges) != 1 {
		t.Fatalf("PSP charges for the second order = %d, want 1", len(c.Charges))
	}
	// The order is confirmed before inventory has committed the sale.
	var st stockJSON
	sagatest.Eventually(t, 10*time.Second, "inventory to commit both sales", func() bool {
		st = stock(t, s, "SKU-4")
		return st.Reserved == 0
	})
	if st.OnHand != 50-3 {
		t.Fatalf("stock = %+v, want on_hand 47 and nothing reserved", st)
	}
	for _, svc := range []*sagatest.Service{s.Order, s.Inventory, s.Payment} {
		if !strings.Contains(svc.Logs(), "broker connection lost") {
			t.Errorf("%s never saw its connection drop: the test did not cut it", svc.Name)
		}
	}
}
