package paymentapp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/inbox/batch"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentapp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentbindings"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentdb"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymenttest"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp/psptest"
)

var quiet = slog.New(slog.DiscardHandler)

// fixture is the payment service's three consumers on a fresh database,
// with a real fake PSP on the same database (as in production, its own
// tables) behind a real HTTP server, and counters of the calls it received.
type fixture struct {
	db        *sqldbtest.DB
	psp       *psp.Server
	pspView   *psp.Client   // the test's own client, for assertions
	books     psptest.Books // the PSP's books, for assertions
	app       *paymentapp.App
	cfg       paymentapp.Config // app's
	saga      *inbox.Consumer
	charges   *inbox.Consumer
	refunds   *inbox.Consumer
	metrics   *prometheus.Registry
	failpoint *failpoint.Registry
	ctx       context.Context // carries failpoint

	chargeCalls       atomic.Int64 // POST /charges received by the PSP
	statusCalls       atomic.Int64 // GET /charges/{key} received by the PSP
	refundCalls       atomic.Int64 // POST /refunds received by the PSP
	refundStatusCalls atomic.Int64 // GET /refunds/{key} received by the PSP
}

// longDeadlines keeps deadlines and the sweep's backoff out of the way of
// tests that do not exercise them; Grace is short so a sweep round called
// by the test finds rows due at once.
var longDeadlines = paymentapp.Config{ChargeDeadline: time.Hour, RefundDeadline: time.Hour,
	Grace: time.Microsecond, Backoff: retry.Backoff{Base: time.Hour, Cap: time.Hour}}

func newFixture(t *testing.T, pspTimeout time.Duration) *fixture {
	t.Helper()
	return newFixtureWith(t, pspTimeout, longDeadlines)
}

// newFixtureAdjusted is newFixture(t, 3*time.Second) with longDeadlines
// changed by adjust: a test of a deadline, a window or the sweep's batch.
func newFixtureAdjusted(t *testing.T, adjust func(*paymentapp.Config)) *fixture {
	t.Helper()
	cfg := longDeadlines
	adjust(&cfg)
	return newFixtureWith(t, 3*time.Second, cfg)
}

func newFixtureWith(t *testing.T, pspTimeout time.Duration, cfg paymentapp.Config) *fixture {
	t.Helper()
	f := &fixture{db: sqldbtest.New(t, "payment"), failpoint: failpoint.NewRegistry(), metrics: prometheus.NewRegistry()}
	f.ctx = failpoint.WithRegistry(context.Background(), f.failpoint)
	f.psp = psp.NewServer(f.db.DB, quiet)
	api := f.psp.Handler()
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/charges":
			f.chargeCalls.Add(1)
		case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/charges/"):
			f.statusCalls.Add(1)
		case r.Method == http.MethodPost && r.URL.Path == "/refunds":
			f.refundCalls.Add(1)
		case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/refunds/"):
			f.refundStatusCalls.Add(1)
		}
		api.ServeHTTP(w, r)
	})
	base := psptest.Serve(t, counted)
	f.pspView, f.books = psp.NewClient(base, nil), psptest.New(base)

	f.cfg = cfg
	f.app = paymentapp.New(f.db.DB, psp.NewClient(base, &http.Client{Timeout: pspTimeout}), quiet, f.metrics, cfg)
	f.saga, _ = f.consumer(paymentbindings.SagaConsumer, paymentbindings.SagaHandlers(f.app), nil)
	f.charges, _ = f.consumer(paymentbindings.PSPConsumer, paymentbindings.PSPHandlers(f.app), nil)
	f.refunds, _ = f.consumer(paymentbindings.RefundConsumer, paymentbindings.RefundHandlers(f.app), nil)
	return f
}

// consumer makes a payment consumer as the service runs it: the chapter's
// (pkg/inbox) and its batch layer, with their metrics on reg (nil: none).
func (f *fixture) consumer(name string, hs batch.Handlers[paymentapp.Store], reg *prometheus.Registry) (*inbox.Consumer, *batch.Consumer[paymentapp.Store]) {
	cfg := inbox.Config{Name: name, DB: f.db.DB, Log: quiet}
	opt := batch.Options{}
	if reg != nil {
		cfg.Metrics, opt.Metrics = inbox.NewMetrics(reg), batch.NewMetrics(reg)
	}
	return batch.New(cfg, hs, opt)
}

// reserve processes inventory.reserved and returns the charge request it
// wrote to the outbox, as the dispatcher would publish it.
func (f *fixture) reserve(t *testing.T, orderID uint64, customer string, amount int64) events.Envelope {
	t.Helper()
	if err := f.saga.Process(f.ctx, paymenttest.Reserved(orderID, customer, amount)); err != nil {
		t.Fatalf("process inventory.reserved: %v", err)
	}
	return f.outboxEvent(t, orderID, events.PaymentChargeRequested)
}

// charged processes inventory.reserved and then the charge request it
// wrote, as the PSP consumer does, failing the test on any error; it
// returns the charge request.
func (f *fixture) charged(t *testing.T, orderID uint64, customer string, amount int64) events.Envelope {
	t.Helper()
	cmd := f.reserve(t, orderID, customer, amount)
	if err := f.charges.Process(f.ctx, cmd); err != nil {
		t.Fatalf("process the charge request: %v", err)
	}
	return cmd
}

// failAfterPSPCall processes the charge request cmd with the process
// failing after the PSP's answer, before the outcome is recorded (the
// failpoint's injected error), and fails the test if it does not fail.
func (f *fixture) failAfterPSPCall(t *testing.T, cmd events.Envelope) {
	t.Helper()
	f.failpoint.Error(paymentapp.FailpointAfterPSPCall, 1)
	if err := f.charges.Process(f.ctx, cmd); err == nil {
		t.Fatal("charge request: want the injected error after the PSP call")
	}
}

type outboxRow struct {
	EventID          string          `db:"event_id"`
	AggregateID      uint64          `db:"aggregate_id"`
	AggregateVersion uint64          `db:"aggregate_version"`
	EventType        string          `db:"event_type"`
	SchemaVersion    int             `db:"schema_version"`
	Payload          json.RawMessage `db:"payload"`
	CorrectsEventID  *string         `db:"corrects_event_id"`
}

// envelope is the row as the dispatcher publishes it and a consumer reads it.
func (r outboxRow) envelope() events.Envelope {
	e := events.Envelope{EventID: r.EventID, Type: r.EventType, AggregateID: r.AggregateID,
		AggregateVersion: r.AggregateVersion, SchemaVersion: r.SchemaVersion,
		CorrelationID: strconv.FormatUint(r.AggregateID, 10), Payload: r.Payload}
	if r.CorrectsEventID != nil {
		e.CorrectsEventID = *r.CorrectsEventID
	}
	return e
}

func (f *fixture) outbox(t *testing.T) []outboxRow {
	t.Helper()
	const q = `SELECT event_id, aggregate_id, aggregate_version, event_type, schema_version, payload, corrects_event_id
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
	found := f.outboxEvents(t, orderID, typ)
	if len(found) != 1 {
		t.Fatalf("outbox has %d %s events for order %d, want 1", len(found), typ, orderID)
	}
	return found[0]
}

// payment is the order's payment, or fails the test.
func (f *fixture) payment(t *testing.T, orderID uint64) payment.Payment {
	t.Helper()
	return mustRead(t, "payment", orderID, func() (payment.Payment, error) {
		return paymentdb.Get(context.Background(), f.db.DB, orderID)
	})
}

// mustRead returns what read reads of the order (its row named what), or
// fails the test.
func mustRead[T any](t *testing.T, what string, orderID uint64, read func() (T, error)) T {
	t.Helper()
	v, err := read()
	if err != nil {
		t.Fatalf("%s %d: %v", what, orderID, err)
	}
	return v
}

// pspCharges is what the PSP holds for the order: the truth about money.
func (f *fixture) pspCharges(t *testing.T, orderID uint64) []psp.Charge {
	t.Helper()
	cs, err := f.books.Charges(context.Background(), strconv.FormatUint(orderID, 10))
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
	return c.Handle(context.Background(), inboxtest.Delivery(paymentbindings.PSPQueue, e))
}

func decode[T any](t *testing.T, raw []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return v
}

// cancel processes order.cancelled for the order.
func (f *fixture) cancel(t *testing.T, orderID uint64) {
	t.Helper()
	if err := f.saga.Process(f.ctx, paymenttest.Cancelled(orderID, "customer asked")); err != nil {
		t.Fatalf("process order.cancelled: %v", err)
	}
}

// markSent records that the order's charge was sent to the PSP, as the
// charge consumer does just before sending: what a send whose answer never
// came back (the process died, the connection dropped) leaves behind.
func (f *fixture) markSent(t *testing.T, orderID uint64) {
	t.Helper()
	if ok, err := paymentdb.MarkChargeSent(f.ctx, f.db.DB, orderID); err != nil || !ok {
		t.Fatalf("mark the charge of %d sent: %v %v", orderID, ok, err)
	}
}

// outboxEvents returns every outbox event of this type for the order, in
// version order, as envelopes.
func (f *fixture) outboxEvents(t *testing.T, orderID uint64, typ events.Type) []events.Envelope {
	t.Helper()
	var out []events.Envelope
	for _, r := range f.orderOutbox(t, orderID) {
		if r.EventType == typ {
			out = append(out, r.envelope())
		}
	}
	return out
}

// outboxTypes lists the order's outbox events as "version type".
func (f *fixture) outboxTypes(t *testing.T, orderID uint64) []string {
	t.Helper()
	var out []string
	for _, r := range f.orderOutbox(t, orderID) {
		out = append(out, fmt.Sprintf("%d %s", r.AggregateVersion, r.EventType))
	}
	return out
}

// orderOutbox is the order's outbox rows, in version order.
func (f *fixture) orderOutbox(t *testing.T, orderID uint64) []outboxRow {
	t.Helper()
	var out []outboxRow
	for _, r := range f.outbox(t) {
		if r.AggregateID == orderID {
			out = append(out, r)
		}
	}
	return out
}

// refund is the order's refund, or fails the test.
func (f *fixture) refund(t *testing.T, orderID uint64) payment.Refund {
	t.Helper()
	return mustRead(t, "refund", orderID, func() (payment.Refund, error) {
		return paymentdb.GetRefund(context.Background(), f.db.DB, orderID)
	})
}

// pspRefunds is what the PSP refunded for the order's charges.
func (f *fixture) pspRefunds(t *testing.T, orderID uint64) []psp.Refund {
	t.Helper()
	var out []psp.Refund
	for _, c := range f.pspCharges(t, orderID) {
		rs, err := f.books.Refunds(context.Background(), c.ChargeID)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rs...)
	}
	return out
}

// sweep runs one sweep round.
func (f *fixture) sweep(t *testing.T) paymentapp.SweepReport {
	t.Helper()
	rep, err := f.app.Sweep(f.ctx)
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	return rep
}

// metric returns the value of a counter or gauge with the given labels
// (name="value" pairs), or 0 when it has no such series.
func (f *fixture) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	v, _ := testutil.Metric(t, f.metrics, name, labels...)
	return v
}
