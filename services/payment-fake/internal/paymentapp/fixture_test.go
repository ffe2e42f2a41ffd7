package paymentapp_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/failpoint"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentamqp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentapp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentdb"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fixture is the payment service's two consumers on a fresh database, with
// a real fake PSP on the same database (as in production, its own tables)
// behind a real HTTP server, and counters of the calls it received.
type fixture struct {
	db        *sqldbtest.DB
	psp       *psp.Server
	pspView   *psp.Client // the test's own client, for assertions
	saga      *inbox.Consumer
	charges   *inbox.Consumer
	failpoint *failpoint.Registry
	ctx       context.Context // carries failpoint

	chargeCalls atomic.Int64 // POST /charges received by the PSP
	statusCalls atomic.Int64 // GET /charges/{key} received by the PSP
}

func newFixture(t *testing.T, pspTimeout time.Duration) *fixture {
	t.Helper()
	f := &fixture{db: sqldbtest.New(t, "payment"), failpoint: failpoint.NewRegistry()}
	f.ctx = failpoint.WithRegistry(context.Background(), f.failpoint)
	f.psp = psp.NewServer(f.db.DB, quiet)
	api := f.psp.Handler()
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/charges":
			f.chargeCalls.Add(1)
		case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/charges/"):
			f.statusCalls.Add(1)
		}
		api.ServeHTTP(w, r)
	})
	mux := http.NewServeMux()
	mux.Handle("/psp/", http.StripPrefix("/psp", counted))
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close) // before the database is dropped
	base := ts.URL + "/psp"
	f.pspView = psp.NewClient(base, nil)

	app := paymentapp.New(f.db.DB, psp.NewClient(base, &http.Client{Timeout: pspTimeout}), quiet, prometheus.NewRegistry())
	f.saga = inbox.NewConsumer(inbox.Config{Name: paymentamqp.SagaConsumer, DB: f.db.DB,
		Handlers: paymentamqp.SagaHandlers(app), Log: quiet})
	f.charges = inbox.NewConsumer(inbox.Config{Name: paymentamqp.PSPConsumer, DB: f.db.DB,
		External: paymentamqp.PSPHandlers(app), Log: quiet})
	return f
}

// reserved is inventory's event for an order, as it arrives on the wire.
func reserved(orderID uint64, customer string, amount int64) events.Envelope {
	body, err := json.Marshal(events.InventoryReservedV1{OrderID: orderID, CustomerID: customer,
		Items: []events.Item{{SKU: "SKU-1", Quantity: 1, UnitPriceCents: amount}}, AmountCents: amount, Currency: "EUR"})
	if err != nil {
		panic(err)
	}
	return events.Envelope{EventID: uuid.NewString(), Type: events.InventoryReserved, AggregateID: orderID,
		AggregateVersion: 2, SchemaVersion: 1, CorrelationID: strconv.FormatUint(orderID, 10),
		OccurredAt: time.Now().UTC(), Payload: body}
}

// reserve processes inventory.reserved and returns the charge request it
// wrote to the outbox, as the dispatcher would publish it.
func (f *fixture) reserve(t *testing.T, orderID uint64, customer string, amount int64) events.Envelope {
	t.Helper()
	if err := f.saga.Process(f.ctx, reserved(orderID, customer, amount)); err != nil {
		t.Fatalf("process inventory.reserved: %v", err)
	}
	return f.outboxEvent(t, orderID, events.PaymentChargeRequested)
}

type outboxRow struct {
	EventID          string          `db:"event_id"`
	AggregateID      uint64          `db:"aggregate_id"`
	AggregateVersion uint64          `db:"aggregate_version"`
	EventType        string          `db:"event_type"`
	SchemaVersion    int             `db:"schema_version"`
	Payload          json.RawMessage `db:"payload"`
}

func (f *fixture) outbox(t *testing.T) []outboxRow {
	t.Helper()
	const q = `SELECT event_id, aggregate_id, aggregate_version, event_type, schema_version, payload
FROM outbox_events ORDER BY aggregate_id, aggregate_version, created_at`
	var rows []outboxRow
	if err := f.db.SelectContext(context.Background(), &rows, q); err != nil {
		t.Fatal(err)
	}
	return rows
}

// outboxEvent returns the one outbox event of this type for the order, as
// an envelope (what the consumer receives after dispatch).
func (f *fixture) outboxEvent(t *testing.T, orderID uint64, typ events.Type) events.Envelope {
	t.Helper()
	var found []outboxRow
	for _, r := range f.outbox(t) {
		if r.AggregateID == orderID && r.EventType == typ {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		t.Fatalf("outbox has %d %s events for order %d, want 1", len(found), typ, orderID)
	}
	r := found[0]
	return events.Envelope{EventID: r.EventID, Type: r.EventType, AggregateID: r.AggregateID,
		AggregateVersion: r.AggregateVersion, SchemaVersion: r.SchemaVersion,
		CorrelationID: strconv.FormatUint(r.AggregateID, 10), Payload: r.Payload}
}

func (f *fixture) payment(t *testing.T, orderID uint64) payment.Payment {
	t.Helper()
	p, err := paymentdb.Get(context.Background(), f.db.DB, orderID)
	if err != nil {
		t.Fatalf("payment %d: %v", orderID, err)
	}
	return p
}

// pspCharges is what the PSP holds for the order: the truth about money.
func (f *fixture) pspCharges(t *testing.T, orderID uint64) []psp.Charge {
	t.Helper()
	cs, err := f.pspView.ChargesForOrder(context.Background(), strconv.FormatUint(orderID, 10))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func (f *fixture) setSwitch(t *testing.T, sw psp.Switch) {
	t.Helper()
	if err := f.psp.SetSwitch(sw); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := f.db.GetContext(context.Background(), &n, q, args...); err != nil {
		t.Fatal(err)
	}
	return n
}

// handle runs the envelope through the consumer's broker entry point, as a
// first delivery, and returns the decision the consume loop would act on.
func handle(c *inbox.Consumer, e events.Envelope) rabbit.Decision {
	m := rabbit.FromEnvelope("saga.events", e)
	d := rabbit.Delivery{Delivery: amqp.Delivery{
		MessageId: m.Publishing.MessageId, Type: m.Publishing.Type, ContentType: m.Publishing.ContentType,
		Headers: m.Publishing.Headers, Body: m.Publishing.Body, RoutingKey: m.RoutingKey,
	}, Queue: paymentamqp.PSPQueue, Attempt: 1}
	return c.Handle(context.Background(), d)
}

func decode[T any](t *testing.T, raw []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return v
}
