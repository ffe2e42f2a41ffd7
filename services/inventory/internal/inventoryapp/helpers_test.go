package inventoryapp_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/pkg/aids/wrongway"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/inbox/batch"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventoryapp"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorybindings"
)

var quiet = slog.New(slog.DiscardHandler)

// seed is the stock of migrations/inventory/00100_stock.sql: {on_hand, reserved}.
var seed = map[string][2]int64{
	"SKU-1": {100, 0}, "SKU-2": {500, 0}, "SKU-3": {20, 0}, "SKU-4": {50, 0},
	"SKU-LIMITED": {1, 0}, "SKU-SOLDOUT": {0, 0},
}

type fixture struct {
	db  *sqldbtest.DB
	app *inventoryapp.App
	c   *inbox.Consumer                     // the service's real consumer: its name and handlers
	b   *batch.Consumer[inventoryapp.Store] // its batch layer
	reg *prometheus.Registry
}

func setup(t *testing.T) *fixture {
	t.Helper()
	return setupWrongWay(t, nil)
}

// setupWrongWay is setup with the wrong-way switches of ww (which the test
// may flip while it runs).
func setupWrongWay(t *testing.T, ww *wrongway.Set) *fixture {
	t.Helper()
	db := sqldbtest.New(t, "inventory")
	// The default lease (15m) and gap deadline (5m): no test waits for
	// either; a test that needs one over moves it into the past.
	app := inventoryapp.New(db.DB, quiet, inventoryapp.Config{Consumer: inventorybindings.ConsumerName, WrongWay: ww})
	reg := prometheus.NewRegistry()
	c, b := batch.New(inbox.Config{Name: inventorybindings.ConsumerName, DB: db.DB, Log: quiet, Metrics: inbox.NewMetrics(reg)},
		inventorybindings.Handlers(app), batch.Options{Metrics: batch.NewMetrics(reg)})
	return &fixture{db: db, app: app, c: c, b: b, reg: reg}
}

// process delivers e through the inbox and fails the test on an error.
func (f *fixture) process(t *testing.T, e events.Envelope) {
	t.Helper()
	if err := f.c.Process(context.Background(), e); err != nil {
		t.Fatalf("Process(%s %s): %v", e.Type, e.EventID, err)
	}
}

func envelope(t testing.TB, typ events.Type, orderID uint64, payload any) events.Envelope {
	t.Helper()
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return events.Envelope{EventID: uuid.NewString(), Type: typ, AggregateID: orderID, AggregateVersion: 1,
		SchemaVersion: 1, CorrelationID: strconv.FormatUint(orderID, 10), Payload: b}
}

// item is one order line at 250 cents a unit.
func item(sku string, qty int) events.Item {
	return events.Item{SKU: sku, Quantity: qty, UnitPriceCents: 250}
}

func createdPayload(orderID uint64, items ...events.Item) events.OrderCreatedV1 {
	var total int64
	for _, it := range items {
		total += it.UnitPriceCents * int64(it.Quantity)
	}
	return events.OrderCreatedV1{OrderID: orderID, CustomerID: "c-1", Items: items, TotalCents: total, Currency: "EUR"}
}

func created(t testing.TB, orderID uint64, items ...events.Item) events.Envelope {
	return envelope(t, events.OrderCreated, orderID, createdPayload(orderID, items...))
}

// confirmed and cancelled are version 2 of the order, as the order service
// numbers them (OrderCreated is 1).
func confirmed(t testing.TB, orderID uint64) events.Envelope {
	e := envelope(t, events.OrderConfirmed, orderID, events.OrderConfirmedV1{OrderID: orderID})
	e.AggregateVersion = 2
	return e
}

func cancelled(t testing.TB, orderID uint64) events.Envelope {
	e := envelope(t, events.OrderCancelled, orderID, events.OrderCancelledV1{OrderID: orderID, Reason: "payment failed: card declined"})
	e.AggregateVersion = 2
	return e
}

// stock returns every SKU's {on_hand, reserved}.
func (f *fixture) stock(t *testing.T) map[string][2]int64 {
	t.Helper()
	var rows []struct {
		SKU      string `db:"sku"`
		OnHand   int64  `db:"on_hand"`
		Reserved int64  `db:"reserved"`
	}
	if err := f.db.Select(&rows, `SELECT sku, on_hand, reserved FROM stock`); err != nil {
		t.Fatal(err)
	}
	out := map[string][2]int64{}
	for _, r := range rows {
		out[r.SKU] = [2]int64{r.OnHand, r.Reserved}
	}
	return out
}

// wantStock checks every SKU: the seed, changed by diff.
func (f *fixture) wantStock(t *testing.T, diff map[string][2]int64) {
	t.Helper()
	got := f.stock(t)
	for sku, s := range seed {
		want := [2]int64{s[0] + diff[sku][0], s[1] + diff[sku][1]}
		if got[sku] != want {
			t.Errorf("stock %s = {on_hand %d, reserved %d}, want {%d, %d}", sku, got[sku][0], got[sku][1], want[0], want[1])
		}
	}
	if len(got) != len(seed) {
		t.Errorf("stock has %d SKUs, want %d", len(got), len(seed))
	}
}

func (f *fixture) reservation(t *testing.T, orderID uint64) inventory.Reservation {
	t.Helper()
	r, err := f.app.Reservation(context.Background(), orderID)
	if err != nil {
		t.Fatalf("reservation %d: %v", orderID, err)
	}
	return r
}

// wantStatus checks the status of the order's reservation.
func (f *fixture) wantStatus(t *testing.T, orderID uint64, want inventory.Status) {
	t.Helper()
	if r := f.reservation(t, orderID); r.Status != want {
		t.Errorf("order %d: reservation %s, want %s", orderID, r.Status, want)
	}
}

type outboxRow struct {
	EventID          string `db:"event_id"`
	AggregateID      uint64 `db:"aggregate_id"`
	AggregateVersion uint64 `db:"aggregate_version"`
	Type             string `db:"event_type"`
	Payload          []byte `db:"payload"`
}

// outbox returns the events written for one order, oldest first.
func (f *fixture) outbox(t *testing.T, orderID uint64) []outboxRow {
	t.Helper()
	var rows []outboxRow
	const q = `SELECT event_id, aggregate_id, aggregate_version, event_type, payload
FROM outbox_events WHERE aggregate_id = ? ORDER BY created_at, aggregate_version`
	if err := f.db.Select(&rows, q, orderID); err != nil {
		t.Fatal(err)
	}
	return rows
}

func (f *fixture) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := f.db.Get(&n, q, args...); err != nil {
		t.Fatal(err)
	}
	return n
}

// eventCount is how many events of type typ the outbox holds, of every
// order.
func (f *fixture) eventCount(t *testing.T, typ string) int {
	t.Helper()
	return f.count(t, `SELECT COUNT(*) FROM outbox_events WHERE event_type = ?`, typ)
}

// endLease moves the lease of an order's reservation into the past, as if
// RESERVATION_TTL had gone by: no test sleeps for a lease.
func (f *fixture) endLease(t *testing.T, orderID uint64) {
	t.Helper()
	const q = `UPDATE reservations SET expires_at = NOW(6) - INTERVAL 1 SECOND WHERE order_id = ?`
	if _, err := f.db.Exec(q, orderID); err != nil {
		t.Fatal(err)
	}
}

// expire ends an order's lease and runs one round of the lease sweep: the
// reservation expires as it would when its time is up.
func (f *fixture) expire(t *testing.T, orderID uint64) inventoryapp.SweepRound {
	t.Helper()
	f.endLease(t, orderID)
	return f.sweep(t)
}

// sweep runs one round of the lease sweep and fails the test on an error.
func (f *fixture) sweep(t *testing.T) inventoryapp.SweepRound {
	t.Helper()
	round, err := f.app.ExpireLeases(context.Background(), 100)
	if err != nil {
		t.Fatalf("ExpireLeases: %v", err)
	}
	return round
}

// gaps returns the gaps recorded for an order.
func (f *fixture) gaps(t *testing.T, orderID uint64) []inventory.Gap {
	t.Helper()
	g, err := f.app.OrderGaps(context.Background(), orderID)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
