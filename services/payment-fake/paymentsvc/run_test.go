package paymentsvc_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentbindings"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymenttest"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp/psptest"
	"github.com/relmsg/ordersaga/services/payment-fake/paymentsvc"
	"github.com/relmsg/ordersaga/services/payment-fake/pspsvc"
)

// stack is the payment service and the PSP process (pspsvc), both
// in-process on one fresh schema, with a probe queue bound to what the
// service publishes.
type stack struct {
	db     *sqldbtest.DB
	ns     rabbit.Namespace
	broker *rabbit.Conn  // declares the exchange and the probe queue
	probe  string        // the probe queue's name
	base   string        // the payment service, http://host:port
	books  psptest.Books // the PSP's books, reached through the service
}

// startStack starts the PSP and the payment service, the service with the
// settings every test here uses and env on top, and waits until the
// service is ready. Outside demo mode the PSP charges only with its key
// (PSP_TOKEN, token), which the payment service sends.
func startStack(t *testing.T, token, probe string, keys []string, env map[string]string) *stack {
	t.Helper()
	s := &stack{db: sqldbtest.New(t, "payment"), ns: rabbittest.Namespace(t), probe: probe}
	rabbittest.Cleanup(t, paymentbindings.Topology(s.ns))
	s.broker = rabbittest.Conn(t, rabbittest.Topology(t, s.ns, rabbit.Queue{Name: probe, Keys: keys}))

	addr, pspAddr := testutil.FreeAddr(t), testutil.FreeAddr(t)
	s.base = "http://" + addr
	s.books = psptest.New(s.base + "/psp")
	testutil.Process(t, pspsvc.Run, map[string]string{"HTTP_ADDR": pspAddr, "MYSQL_DSN": s.db.DSN, "LOG_LEVEL": "warn", "INSTANCE_ID": "psp", "PSP_TOKEN": token})
	all := map[string]string{
		"PSP_URL":              "http://" + pspAddr + "/psp",
		"PSP_TOKEN":            token,
		"HTTP_ADDR":            addr,
		"MYSQL_DSN":            s.db.DSN,
		"AMQP_URL":             rabbittest.URL(),
		"AMQP_NAMESPACE":       string(s.ns),
		"LOG_LEVEL":            "warn",
		"OUTBOX_POLL_INTERVAL": "250ms",
		"SHUTDOWN_TIMEOUT":     "10s",
	}
	maps.Copy(all, env)
	testutil.Process(t, paymentsvc.Run, all)
	testutil.WaitReady(t, s.base)
	return s
}

// drain takes n messages off the probe queue, and returns them by type.
func (s *stack) drain(t *testing.T, n int) ([]amqp.Delivery, map[string]amqp.Delivery) {
	t.Helper()
	msgs := rabbittest.Drain(t, s.ns.Queue(s.probe), n, 15*time.Second)
	byType := map[string]amqp.Delivery{}
	for _, m := range msgs {
		byType[m.Type] = m
	}
	return msgs, byType
}

// The whole service in-process against the real database and broker:
// inventory.reserved in, through the outbox to the service's own PSP
// consumer, over HTTP to the PSP process (pspsvc, in-process here, on the
// same schema), and payment.succeeded / payment.failed out.
func TestRunChargesReservedOrders(t *testing.T) {
	t.Parallel()
	s := startStack(t, "k1", "probe.payment-results", []string{events.PaymentSucceeded, events.PaymentFailed}, nil)
	base := s.base

	publish(t, s.broker, s.ns, paymenttest.Reserved(42, "c-1", 1500), paymenttest.Reserved(43, "decline-1", 2500))

	var p42, p43 map[string]any
	testutil.WaitFor(t, 30*time.Second, "both payments to be decided", func() bool {
		p42, p43 = payment(t, base, 42), payment(t, base, 43)
		return p42["status"] == "succeeded" && p43["status"] == "failed"
	})
	charge42, _ := p42["psp_charge_id"].(string)
	if !strings.HasPrefix(charge42, "ch_") || p42["amount_cents"] != 1500.0 || p42["idempotency_key"] != "charge-42" {
		t.Errorf("payment 42 = %v, want succeeded, 1500, key charge-42, a ch_ charge id", p42)
	}
	if p43["failure_reason"] != psp.DeclineCardDeclined {
		t.Errorf("payment 43 = %v, want failed with %s", p43, psp.DeclineCardDeclined)
	}

	// The results left through the outbox and were routed.
	msgs, byType := s.drain(t, 2)
	if len(msgs) != 2 || len(byType) != 2 {
		t.Fatalf("probe got %d messages %v, want one payment.succeeded and one payment.failed", len(msgs), byType)
	}
	checkSucceeded(t, byType[events.PaymentSucceeded], charge42)
	var failed events.PaymentFailedV1
	if err := json.Unmarshal(byType[events.PaymentFailed].Body, &failed); err != nil {
		t.Fatal(err)
	}
	if failed != (events.PaymentFailedV1{OrderID: 43, Reason: psp.DeclineCardDeclined}) {
		t.Errorf("payment.failed = %+v", failed)
	}

	// Money: exactly one charge per order at the PSP, reached over HTTP.
	for order, status := range map[string]string{"42": psp.StatusSucceeded, "43": psp.StatusDeclined} {
		cs, err := s.books.Charges(context.Background(), order)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != 1 || cs[0].Status != status {
			t.Errorf("PSP charges for order %s = %+v, want one %s", order, cs, status)
		}
	}

	// Every outbox row was sent: two charge requests and two results.
	testutil.WaitFor(t, 15*time.Second, "every outbox row to be marked sent", func() bool {
		var sent, all int
		_ = s.db.Get(&all, `SELECT COUNT(*) FROM outbox_events`)
		_ = s.db.Get(&sent, `SELECT COUNT(*) FROM outbox_events WHERE status = 'sent'`)
		return all == 4 && sent == 4
	})

	_, metrics := get(base + "/metrics")
	if !strings.Contains(metrics, `payment_psp_calls_total{call="charge",result="ok"} 2`) {
		t.Errorf("metrics lack the two successful PSP charge calls:\n%s", grep(metrics, "payment_psp"))
	}
	if status, body := get(base + "/payments/44"); status != http.StatusNotFound {
		t.Errorf("GET /payments/44 = %d %s, want 404", status, body)
	}
}

// checkSucceeded checks order 42's payment.succeeded as the broker
// delivered it: its payload, and the contract's message properties.
func checkSucceeded(t *testing.T, ok amqp.Delivery, chargeID string) {
	t.Helper()
	var succeeded events.PaymentSucceededV1
	if err := json.Unmarshal(ok.Body, &succeeded); err != nil {
		t.Fatal(err)
	}
	if want := (events.PaymentSucceededV1{OrderID: 42, AmountCents: 1500, Currency: "EUR", ChargeID: chargeID}); succeeded != want {
		t.Errorf("payment.succeeded = %+v, want %+v", succeeded, want)
	}
	if _, err := uuid.Parse(ok.MessageId); err != nil || ok.ContentType != "application/json" ||
		ok.Headers[events.HeaderAggregateID] != "42" || ok.Headers[events.HeaderAggregateVersion] != int64(2) ||
		ok.Headers[events.HeaderCorrelationID] != "42" || ok.DeliveryMode != amqp.Persistent {
		t.Errorf("payment.succeeded message: id %q, content type %q, persistent %v, headers %v",
			ok.MessageId, ok.ContentType, ok.DeliveryMode == amqp.Persistent, ok.Headers)
	}
}

// The compensation through the real broker: a charged order is cancelled
// (order.cancelled on the saga exchange), the payment service refunds it
// through its own payment.refund-requested and "payment-refunds" consumer,
// and payment.refunded goes out to the order service. A cancel that
// overtakes inventory.reserved leaves a marker, and the late event charges
// nothing. The parked list is reachable under /admin with the token, and
// the new metrics are exported.
func TestRunRefundsCancelledOrders(t *testing.T) {
	t.Parallel()
	s := startStack(t, "k2", "probe.payment-refunds", []string{events.PaymentSucceeded, events.PaymentRefunded},
		map[string]string{"ADMIN_TOKEN": "t0ken", "PAYMENT_SWEEP_INTERVAL": "100ms"})
	base := s.base

	publish(t, s.broker, s.ns, paymenttest.Reserved(42, "c-1", 1500))
	testutil.WaitFor(t, 30*time.Second, "the charge", func() bool { return payment(t, base, 42)["status"] == "succeeded" })
	publish(t, s.broker, s.ns, paymenttest.Cancelled(42, "customer asked"))
	var p42 map[string]any
	testutil.WaitFor(t, 30*time.Second, "the refund", func() bool {
		p42 = payment(t, base, 42)
		return p42["status"] == "refunded"
	})
	refund, _ := p42["refund"].(map[string]any)
	if p42["cancel_requested"] != true || refund["status"] != "succeeded" || refund["amount_cents"] != 1500.0 ||
		refund["idempotency_key"] != "refund-42" {
		t.Errorf("payment 42 = %v, want refunded with a succeeded refund of 1500", p42)
	}

	msgs, byType := s.drain(t, 2)
	var refunded events.PaymentRefundedV1
	if err := json.Unmarshal(byType[events.PaymentRefunded].Body, &refunded); err != nil {
		t.Fatalf("payment.refunded: %v (got %d messages)", err, len(msgs))
	}
	if refunded.OrderID != 42 || refunded.AmountCents != 1500 || refunded.RefundID != refund["psp_refund_id"] {
		t.Errorf("payment.refunded = %+v, want order 42, 1500, refund %v", refunded, refund["psp_refund_id"])
	}
	if v := byType[events.PaymentRefunded].Headers[events.HeaderAggregateVersion]; v != int64(4) {
		t.Errorf("payment.refunded aggregate_version = %v, want 4 (requested, succeeded, refund requested, refunded)", v)
	}
	charges, err := s.books.Charges(context.Background(), "42")
	if err != nil || len(charges) != 1 {
		t.Fatalf("PSP charges = %v, %v; want 1", charges, err)
	}
	if refunds, err := s.books.Refunds(context.Background(), charges[0].ChargeID); err != nil || len(refunds) != 1 ||
		refunds[0].AmountCents != 1500 {
		t.Errorf("PSP refunds = %+v, %v; want one of 1500", refunds, err)
	}

	// Cancel first, then the late inventory.reserved.
	publish(t, s.broker, s.ns, paymenttest.Cancelled(50, "customer asked"))
	testutil.WaitFor(t, 30*time.Second, "the cancel marker", func() bool {
		return payment(t, base, 50)["status"] == "cancelled_before_charge"
	})
	late := paymenttest.Reserved(50, "c-1", 900)
	publish(t, s.broker, s.ns, late)
	testutil.WaitFor(t, 30*time.Second, "the late event to be recorded as stale", func() bool {
		reason, _ := payment(t, base, 50)["cancel_reason"].(string)
		return strings.Contains(reason, late.EventID)
	})
	if cs, err := s.books.Charges(context.Background(), "50"); err != nil || len(cs) != 0 {
		t.Errorf("PSP charges for order 50 = %v, %v; want none", cs, err)
	}
	checkAdminAndMetrics(t, base)
}

// checkAdminAndMetrics checks, after one refund and nothing parked, the
// parked list under /admin (with the token only) and the compensation
// metrics.
func checkAdminAndMetrics(t *testing.T, base string) {
	t.Helper()
	if status, body := getWithToken(base+"/admin/needs-attention", "t0ken"); status != http.StatusOK ||
		!strings.Contains(body, `"charges": []`) || !strings.Contains(body, `"refunds": []`) {
		t.Errorf("GET /admin/needs-attention = %d %s", status, body)
	}
	if status, _ := getWithToken(base+"/admin/needs-attention", ""); status != http.StatusUnauthorized {
		t.Errorf("GET /admin/needs-attention without the token = %d, want 401", status)
	}
	_, metrics := get(base + "/metrics")
	for _, want := range []string{`payment_needs_attention{kind="charge"} 0`, `payment_needs_attention{kind="refund"} 0`,
		`payment_refunds_total{result="succeeded"} 1`, `payment_compensation_failures_total 0`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s:\n%s", want, grep(metrics, "payment_"))
		}
	}
}

func getWithToken(url, token string) (int, string) {
	a, err := testutil.Fetch(http.MethodGet, url, "", "Authorization", testutil.Bearer(token))
	if err != nil {
		return 0, err.Error()
	}
	return a.Status, a.Body
}

// publish sends the events as inventory would, with publisher confirms.
func publish(t *testing.T, broker *rabbit.Conn, ns rabbit.Namespace, evs ...events.Envelope) {
	t.Helper()
	pub := broker.NewPublisher()
	defer pub.Close()
	msgs := make([]rabbit.Message, len(evs))
	for i, e := range evs {
		msgs[i] = rabbit.FromEnvelope(ns.Exchange(), e)
	}
	for i, err := range pub.Publish(context.Background(), msgs, 10*time.Second) {
		if err != nil {
			t.Fatalf("publish %s: %v", evs[i].Type, err)
		}
	}
}

func payment(t *testing.T, base string, orderID int) map[string]any {
	t.Helper()
	status, body := get(base + "/payments/" + strconv.Itoa(orderID))
	if status != http.StatusOK {
		return nil
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("GET /payments/%d: %v in %s", orderID, err, body)
	}
	return p
}

func get(url string) (int, string) { return getWithToken(url, "") }

func grep(s, substr string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
