package process_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/compose/process"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

// request sends one request with the admin token; an error is the
// answer's body, with status 0.
func request(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	ct := ""
	if body != "" {
		ct = "application/json"
	}
	a, err := testutil.Fetch(method, url, body, "Authorization", "Bearer secret", "Content-Type", ct)
	if err != nil {
		return 0, err.Error()
	}
	return a.Status, a.Body
}

// What every service gets from pkg/compose/process, in one running runtime: the
// consumer's replay window comes from INBOX_RETENTION, the retention job runs
// every RETENTION_INTERVAL, and POST /admin/dead-letters/redrive finds the
// consumer's queue through Runtime.Consume and brings a fixed dead letter
// back.
func TestRuntimeWiresRedriveReplayWindowAndRetention(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	db.MustExec(`CREATE TABLE effects (event_id CHAR(36) PRIMARY KEY)`)
	ns := rabbittest.Namespace(t)
	topology := func(ns rabbit.Namespace) rabbit.Topology {
		return ns.Topology(rabbit.Queue{Name: "svc.order-events", Keys: []string{events.OrderCreated}})
	}
	rabbittest.Cleanup(t, topology(ns))

	var broken atomic.Bool
	broken.Store(true)
	base, logs := startService(t, db.DSN, ns, topology, func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
		if broken.Load() {
			return inbox.Permanent(errors.New("bug in the handler"))
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO effects VALUES (?)`, e.EventID)
		return err
	})

	conn := rabbittest.Conn(t, topology(ns))
	pub := conn.NewPublisher()
	defer pub.Close()
	publish := func(e events.Envelope) {
		if err := pub.Publish(context.Background(), []rabbit.Message{rabbit.FromEnvelope(ns.Exchange(), e)}, 5*time.Second)[0]; err != nil {
			t.Fatal(err)
		}
	}
	fixable := events.Envelope{EventID: uuid.NewString(), Type: events.OrderCreated, AggregateID: 5, AggregateVersion: 1,
		SchemaVersion: 1, OccurredAt: time.Now(), Payload: []byte(`{"order_id":"5","note":"fixable"}`)}
	old := fixable
	old.EventID, old.OccurredAt, old.Payload = uuid.NewString(), time.Now().Add(-2*time.Hour), []byte(`{"order_id":"6"}`)
	publish(fixable)
	publish(old)
	reasons := waitDeadLetters(t, db, 2)
	if !strings.Contains(reasons[fixable.EventID], "bug in the handler") ||
		!strings.Contains(reasons[old.EventID], "older than the inbox replay window (1h0m0s)") {
		t.Fatalf("dead letter reasons = %v", reasons)
	}

	broken.Store(false)
	code, body := request(t, http.MethodPost, base+"/admin/dead-letters/redrive", `{"consumer":"svc","q":"fixable"}`)
	if code != http.StatusOK || !strings.Contains(body, `"redriven": 1`) || !strings.Contains(body, ns.Queue("svc.order-events")) {
		t.Fatalf("redrive: %d %s, want one redriven to the consumer's queue", code, body)
	}
	testutil.WaitFor(t, 20*time.Second, "the redriven event to be applied", func() bool {
		var n int
		_ = db.Get(&n, `SELECT COUNT(*) FROM effects WHERE event_id = ?`, fixable.EventID)
		return n == 1
	})

	wantInstanceNamed(t, db, logs, base, fixable.EventID)

	// The retention job: an inbox row older than INBOX_RETENTION goes.
	db.MustExec(`UPDATE consumer_inbox SET processed_at = NOW(6) - INTERVAL 2 HOUR WHERE event_id = ?`, fixable.EventID)
	testutil.WaitFor(t, 20*time.Second, "the retention job to delete the old inbox row", func() bool {
		var n int
		_ = db.Get(&n, `SELECT COUNT(*) FROM consumer_inbox`)
		return n == 0
	})
	// The counters move right after the commits the waits above saw: wait
	// for them too (under load the scrape can come first).
	for _, want := range []string{`retention_deleted_total{table="consumer_inbox"} 1`, `consumer_dead_letters_redriven_total{consumer="svc"} 1`} {
		testutil.WaitFor(t, 10*time.Second, "/metrics to show "+want, func() bool {
			_, metrics := request(t, http.MethodGet, base+"/metrics", "")
			return strings.Contains(metrics, want)
		})
	}
}

// waitDeadLetters waits until there are n dead letters and returns their
// reasons by event id.
func waitDeadLetters(t *testing.T, db *sqldbtest.DB, n int) map[string]string {
	t.Helper()
	reasons := map[string]string{}
	testutil.WaitFor(t, 20*time.Second, fmt.Sprintf("%d dead letters", n), func() bool {
		var rows []struct {
			EventID string `db:"event_id"`
			Reason  string `db:"reason"`
		}
		_ = db.Select(&rows, `SELECT event_id, reason FROM dead_letters`)
		for _, r := range rows {
			reasons[r.EventID] = r.Reason
		}
		return len(rows) == n
	})
	return reasons
}

// startService starts a runtime as a service "svc" (instance svc-7) does,
// on the database dsn and the namespace ns, with a consumer "svc" whose
// handler of order.created is h, and serves it until the test ends. It
// returns the service's base URL and its log.
func startService(t *testing.T, dsn string, ns rabbit.Namespace, topology func(rabbit.Namespace) rabbit.Topology, h inbox.Handler) (string, *testutil.SyncBuffer) {
	t.Helper()
	addr := testutil.FreeAddr(t)
	env := map[string]string{
		"HTTP_ADDR": addr, "MYSQL_DSN": dsn, "MYSQL_CREATE_DATABASE": "false", "AMQP_URL": rabbittest.URL(),
		"AMQP_NAMESPACE": string(ns), "ADMIN_TOKEN": "secret", "SHUTDOWN_TIMEOUT": "10s",
		"INBOX_RETENTION": "1h", "RETENTION_INTERVAL": "100ms", "INSTANCE_ID": "svc-7",
	}
	cfg := process.Load(process.NewEnv(func(k string) string { return env[k] }), "svc", ":0", "unused")
	logs := &testutil.SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	ctx, rt, err := process.Start(ctx, cfg, "order", topology, logs)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ic := rt.InboxConfig("svc")
	ic.Handlers = map[events.Type]inbox.Handler{events.OrderCreated: h}
	rt.Consume("svc.order-events", inbox.NewConsumer(ic), nil)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", logs.String())
		}
	})
	testutil.Background(t, "Serve", func(stop context.Context) error {
		context.AfterFunc(stop, cancel) // ctx carries the runtime's failpoints: Serve runs on it
		return rt.Serve(ctx, rt.Router())
	})
	base := "http://" + addr
	testutil.WaitFor(t, 20*time.Second, "ready", func() bool { code, _ := request(t, http.MethodGet, base+"/readyz", ""); return code == http.StatusOK })
	return base, logs
}

// wantInstanceNamed checks that the instance svc-7 is named in the inbox
// row of the event it applied, in its log lines, in service_info and in
// the admin summary.
func wantInstanceNamed(t *testing.T, db *sqldbtest.DB, logs *testutil.SyncBuffer, base, eventID string) {
	t.Helper()
	var by string
	if err := db.Get(&by, `SELECT COALESCE(instance, '') FROM consumer_inbox WHERE event_id = ?`, eventID); err != nil || by != "svc-7" {
		t.Errorf("inbox row's instance = %q (%v), want svc-7", by, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if !strings.Contains(line, `"instance":"svc-7"`) {
			t.Errorf("a log line without the instance: %s", line)
			break
		}
	}
	if _, metrics := request(t, http.MethodGet, base+"/metrics", ""); !strings.Contains(metrics, `service_info{instance="svc-7",service="svc"} 1`) {
		t.Errorf("/metrics has no service_info for svc-7")
	}
	if _, body := request(t, http.MethodGet, base+"/admin/outbox/summary", ""); !strings.Contains(body, `"instance": "svc-7"`) {
		t.Errorf("admin summary %s: no instance", body)
	}
}
