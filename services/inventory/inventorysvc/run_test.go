package inventorysvc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorybindings"
	"github.com/relmsg/ordersaga/services/inventory/inventorysvc"
)

// start runs the service in process on db and ns with env added to the
// test defaults, waits until it is ready, and stops it at cleanup (or when
// the returned stop is called), checking that Run returns nil. It returns
// the service's base URL.
func start(t *testing.T, db *sqldbtest.DB, ns rabbit.Namespace, extra map[string]string) (string, func()) {
	t.Helper()
	addr := testutil.FreeAddr(t)
	env := map[string]string{
		"HTTP_ADDR":             addr,
		"MYSQL_DSN":             db.DSN,
		"MYSQL_CREATE_DATABASE": "false",
		"AMQP_URL":              rabbittest.URL(),
		"AMQP_NAMESPACE":        string(ns),
		"OUTBOX_POLL_INTERVAL":  "200ms",
		"SHUTDOWN_TIMEOUT":      "10s",
	}
	maps.Copy(env, extra)
	stop := testutil.Process(t, inventorysvc.Run, env)
	base := "http://" + addr
	testutil.WaitReady(t, base)
	return base, stop
}

// The service end to end, in process, on the real database and broker: an
// OrderCreated published to the exchange becomes a reservation, and the
// InventoryReserved result leaves through the outbox with the contract's
// message properties.
func TestRunReservesAndPublishesTheResult(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "inventory")
	ns, pub := withResults(t, events.InventoryReserved, events.InventoryRejected)
	base, stop := start(t, db, ns, nil)

	const orderID = 42
	e := envelope(events.OrderCreated, orderID, 1, events.OrderCreatedV1{OrderID: orderID, CustomerID: "c-1", TotalCents: 750,
		Currency: "EUR", Items: []events.Item{{SKU: "SKU-1", Quantity: 2, UnitPriceCents: 250}, {SKU: "SKU-3", Quantity: 1, UnitPriceCents: 250}}})
	publish(t, pub, ns, e)

	var res map[string]any
	testutil.WaitForErr(t, 15*time.Second, "reservation 42", func() (bool, error) {
		code, body, err := get(fmt.Sprintf("%s/reservations/%d", base, orderID))
		if err != nil || code != http.StatusOK {
			return false, err
		}
		return true, json.Unmarshal(body, &res)
	})
	if res["status"] != "reserved" || res["order_id"] != "42" {
		t.Errorf("reservation = %v, want order 42 reserved", res)
	}
	code, body, err := get(base + "/stock/SKU-1")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /stock/SKU-1 = %d, %v", code, err)
	}
	var s map[string]any
	_ = json.Unmarshal(body, &s)
	if s["reserved"] != float64(2) || s["available"] != float64(98) {
		t.Errorf("stock SKU-1 = %v, want reserved 2, available 98", s)
	}

	msgs := rabbittest.Drain(t, ns.Queue(resultsQueue), 1, 15*time.Second)
	if len(msgs) != 1 {
		t.Fatalf("results queue: %d messages, want 1 InventoryReserved", len(msgs))
	}
	m := msgs[0]
	if m.Type != events.InventoryReserved || m.ContentType != "application/json" || m.DeliveryMode != 2 {
		t.Errorf("message type %q, content type %q, delivery mode %d; want inventory.reserved, JSON, persistent",
			m.Type, m.ContentType, m.DeliveryMode)
	}
	if _, err := uuid.Parse(m.MessageId); err != nil || m.MessageId == e.EventID {
		t.Errorf("message_id %q: want a new event id (UUID) for the result", m.MessageId)
	}
	if m.Headers[events.HeaderAggregateID] != "42" || fmt.Sprint(m.Headers[events.HeaderAggregateVersion]) != "1" ||
		m.Headers[events.HeaderCorrelationID] != "42" {
		t.Errorf("headers = %v, want aggregate_id 42, aggregate_version 1, correlation_id 42", m.Headers)
	}
	var p events.InventoryReservedV1
	if err := json.Unmarshal(m.Body, &p); err != nil || p.OrderID != orderID || p.AmountCents != 750 || p.CustomerID != "c-1" {
		t.Errorf("body = %s (%v), want order 42, amount 750, customer c-1", m.Body, err)
	}

	for _, path := range []string{"/healthz", "/metrics", "/stock"} {
		if code, _, err := get(base + path); err != nil || code != http.StatusOK {
			t.Errorf("GET %s = %d, %v; want 200", path, code, err)
		}
	}
	stop()
}

func get(url string) (int, []byte, error) {
	a, err := testutil.Fetch(http.MethodGet, url, "")
	return a.Status, []byte(a.Body), err
}

// Every bad setting is reported at once, before anything is opened.
func TestRunReportsEveryBadSetting(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OUTBOX_WORKERS": "0", "LOG_LEVEL": "loud", "AMQP_URL": "http://broker", "SHUTDOWN_TIMEOUT": "-1s",
		"RESERVATION_TTL": "0s", "RESERVATION_SWEEP_INTERVAL": "soon", "RESERVATION_SWEEP_BATCH": "0",
		"GAP_DEADLINE": "-5m", "GAP_CHECK_INTERVAL": "1"}
	err := inventorysvc.Run(context.Background(), func(k string) string { return env[k] }, io.Discard)
	if err == nil {
		t.Fatal("Run with bad settings returned nil")
	}
	for _, key := range []string{"OUTBOX_WORKERS", "LOG_LEVEL", "AMQP_URL", "SHUTDOWN_TIMEOUT",
		"RESERVATION_TTL", "RESERVATION_SWEEP_INTERVAL", "RESERVATION_SWEEP_BATCH", "GAP_DEADLINE", "GAP_CHECK_INTERVAL"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error %q does not mention %s", err, key)
		}
	}
}

// resultsQueue is a queue of the test's own, standing in for the order
// service.
const resultsQueue = "test.inventory-results"

// withResults makes the test's namespace with the service's topology and
// resultsQueue bound to keys, and returns the namespace and a publisher to
// its exchange.
func withResults(t *testing.T, keys ...string) (rabbit.Namespace, *rabbit.Publisher) {
	t.Helper()
	ns := rabbittest.Namespace(t)
	rabbittest.Cleanup(t, inventorybindings.Topology(ns))
	conn := rabbittest.Conn(t, rabbittest.Topology(t, ns, rabbit.Queue{Name: resultsQueue, Keys: keys}))
	pub := conn.NewPublisher()
	t.Cleanup(pub.Close)
	return ns, pub
}

// envelope is the order service's event of an order, as it publishes it.
func envelope(typ string, orderID, version uint64, payload any) events.Envelope {
	body, err := json.Marshal(payload)
	if err != nil {
		panic(err)
	}
	return events.Envelope{EventID: uuid.NewString(), Type: typ, AggregateID: orderID, AggregateVersion: version,
		SchemaVersion: 1, CorrelationID: strconv.FormatUint(orderID, 10), OccurredAt: time.Now(), Payload: body}
}

// publish sends e to the exchange, retrying until it routes: ready means
// connected, and the topology is declared on connect, so it routes; a
// return would still be retried.
func publish(t *testing.T, pub *rabbit.Publisher, ns rabbit.Namespace, e events.Envelope) {
	t.Helper()
	testutil.WaitForErr(t, 15*time.Second, "publish "+e.Type, func() (bool, error) {
		errs := pub.Publish(context.Background(), []rabbit.Message{rabbit.FromEnvelope(ns.Exchange(), e)}, 5*time.Second)
		return errs[0] == nil, nil
	})
}

func getJSON(t *testing.T, url, token string, v any) int {
	t.Helper()
	a, err := testutil.Fetch(http.MethodGet, url, "", "Authorization", testutil.Bearer(token))
	if err != nil {
		return 0
	}
	if err := json.Unmarshal([]byte(a.Body), v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return a.Status
}

// The background jobs and the operator surface, wired: with a lease and a
// gap deadline of a millisecond, the sweep expires a reservation and its
// InventoryReservationExpired leaves through the outbox; a cancel for an
// unknown order records a gap that the gap check reports as overdue, listed
// by GET /admin/gaps?open=true and counted in /metrics.
func TestRunExpiresLeasesAndReportsGaps(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "inventory")
	ns, pub := withResults(t, events.InventoryReserved, events.InventoryReservationExpired)
	const token = "test-admin-token"
	base, _ := start(t, db, ns, map[string]string{
		"RESERVATION_TTL": "1ms", "RESERVATION_SWEEP_INTERVAL": "50ms",
		"GAP_DEADLINE": "1ms", "GAP_CHECK_INTERVAL": "50ms", "ADMIN_TOKEN": token,
	})

	publish(t, pub, ns, envelope(events.OrderCreated, 43, 1, events.OrderCreatedV1{OrderID: 43, CustomerID: "c-1", TotalCents: 250,
		Currency: "EUR", Items: []events.Item{{SKU: "SKU-3", Quantity: 1, UnitPriceCents: 250}}}))
	cancel := envelope(events.OrderCancelled, 44, 2, events.OrderCancelledV1{OrderID: 44, Reason: "user cancel"})
	cancelID := cancel.EventID
	publish(t, pub, ns, cancel)

	msgs := rabbittest.Drain(t, ns.Queue(resultsQueue), 2, 15*time.Second)
	// The outbox does not order the two on the wire (two dispatcher
	// workers may each take one); their versions do.
	sort.Slice(msgs, func(i, j int) bool {
		return fmt.Sprint(msgs[i].Headers[events.HeaderAggregateVersion]) < fmt.Sprint(msgs[j].Headers[events.HeaderAggregateVersion])
	})
	if len(msgs) != 2 || msgs[0].Type != events.InventoryReserved || msgs[1].Type != events.InventoryReservationExpired ||
		fmt.Sprint(msgs[1].Headers[events.HeaderAggregateVersion]) != "2" {
		t.Fatalf("results = %d messages %v, want inventory.reserved at version 1 and inventory.reservation-expired at version 2", len(msgs), msgs)
	}
	var res map[string]any
	if code := getJSON(t, base+"/reservations/43", "", &res); code != http.StatusOK || res["status"] != "expired" || res["expired_at"] == nil {
		t.Errorf("reservation 43 = %d %v, want expired", code, res)
	}

	testutil.WaitForErr(t, 15*time.Second, "overdue gap reported", func() (bool, error) {
		var v struct {
			Gaps []map[string]any `json:"gaps"`
		}
		if code := getJSON(t, base+"/admin/gaps?open=true", token, &v); code != http.StatusOK {
			return false, fmt.Errorf("GET /admin/gaps: %d", code)
		}
		return len(v.Gaps) == 1 && v.Gaps[0]["event_id"] == cancelID && v.Gaps[0]["overdue"] == true &&
			v.Gaps[0]["alerted_at"] != nil, nil
	})
	_, body, err := get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"inventory_reservations_expired_total 1", `inventory_event_gaps{state="overdue"} 1`,
		`inventory_event_gaps{state="open"} 0`, "inventory_commit_failed_total 0"} {
		if !strings.Contains(string(body), "\n"+line+"\n") {
			t.Errorf("/metrics has no line %q", line)
		}
	}
	if code := getJSON(t, base+"/admin/gaps", "wrong", &map[string]any{}); code != http.StatusUnauthorized {
		t.Errorf("GET /admin/gaps with a wrong token = %d, want 401", code)
	}
}
