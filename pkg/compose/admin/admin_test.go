package admin_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/compose/admin"
	"github.com/relmsg/ordersaga/pkg/deadletter"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

var quiet = slog.New(slog.DiscardHandler)

func call(t *testing.T, h http.Handler, method, path, body string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer secret")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s %s: body %q is not JSON: %v", method, path, rec.Body.String(), err)
	}
	return rec.Code, out
}

// POST /admin/dead-letters/redrive puts the original message (same
// message_id, type, headers, body) on the consumer's own queue and marks the
// row; bad selections are 400 and publish nothing.
func TestRedriveEndpoint(t *testing.T) {
	t.Parallel()
	a := newRedriveAdmin(t)
	r, queue := a.router, a.queue
	e := a.deadPayment(t, `{"order_id":"77","psp_charge_id":"ch_1"}`, "handler bug")

	for _, body := range []string{`{}`, `{"limit":5}`, `{"ids":[1],"consumer":"order"}`, `{"ids":[1],"bogus":1}`, `{"consumer":"order","limit":5000}`} {
		if code, out := call(t, r, http.MethodPost, "/admin/dead-letters/redrive", body); code != http.StatusBadRequest {
			t.Errorf("body %s: %d %v, want 400", body, code, out)
		}
	}

	code, out := call(t, r, http.MethodPost, "/admin/dead-letters/redrive", `{"consumer":"order","q":"ch_1"}`)
	if code != http.StatusOK || out["redriven"] != float64(1) {
		t.Fatalf("redrive: %d %v, want 200 and one redriven", code, out)
	}
	got := rabbittest.Drain(t, queue, 1, 10*time.Second)
	if len(got) != 1 {
		t.Fatalf("messages on %s: %d, want 1", queue, len(got))
	}
	d := rabbit.Delivery{Delivery: got[0]}
	env, err := d.Envelope()
	if err != nil {
		t.Fatalf("redriven message is invalid: %v", err)
	}
	if env.EventID != e.EventID || env.Type != e.Type || env.AggregateVersion != 3 || string(env.Payload) != string(e.Payload) ||
		!env.OccurredAt.Equal(e.OccurredAt) || got[0].RoutingKey != queue {
		t.Fatalf("redriven %+v (routing key %s), want the original %+v on %s", env, got[0].RoutingKey, e, queue)
	}

	code, out = call(t, r, http.MethodGet, "/admin/dead-letters?event_id="+e.EventID, "")
	rows, _ := out["dead_letters"].([]any)
	if code != http.StatusOK || len(rows) != 1 || rows[0].(map[string]any)["status"] != "redriven" {
		t.Fatalf("list: %d %v, want the row redriven", code, out)
	}
	// What an operator reads: the payload as text, the headers as JSON.
	row := rows[0].(map[string]any)
	hdrs, _ := row["headers"].(map[string]any)
	if row["payload"] != string(e.Payload) || row["consumer"] != "order" || row["reason"] != "handler bug" ||
		hdrs["aggregate_version"] != float64(3) || row["redriven_at"] == nil {
		t.Fatalf("listed row = %v, want the payload text, the headers as an object, reason and redriven_at", row)
	}
	code, out = call(t, r, http.MethodGet, "/admin/dead-letters?status=dead&q=ch_1", "")
	if rows, _ := out["dead_letters"].([]any); code != http.StatusOK || len(rows) != 0 {
		t.Fatalf("list of dead rows after the redrive: %d %v, want none", code, out)
	}

	// Twice: nothing selected by the filter, not_dead by id.
	code, out = call(t, r, http.MethodPost, "/admin/dead-letters/redrive", `{"consumer":"order","q":"ch_1"}`)
	if code != http.StatusOK || out["requested"] != float64(0) {
		t.Fatalf("second filter redrive: %d %v, want nothing selected", code, out)
	}
	id := rows[0].(map[string]any)["id"]
	code, out = call(t, r, http.MethodPost, "/admin/dead-letters/redrive", `{"ids":[`+jsonNumber(id)+`]}`)
	results, _ := out["results"].([]any)
	if code != http.StatusOK || len(results) != 1 || results[0].(map[string]any)["outcome"] != deadletter.OutcomeNotDead {
		t.Fatalf("second redrive by id: %d %v, want not_dead", code, out)
	}
	if extra := rabbittest.Drain(t, queue, 0, 0); len(extra) != 0 {
		t.Fatalf("a second redrive published %d messages, want none", len(extra))
	}
}

// redriveAdmin is the admin API over a database whose dead letters of
// consumer "order" go back to queue, a queue of its own bound to
// payment.succeeded.
type redriveAdmin struct {
	db     *sqldbtest.DB
	router chi.Router
	queue  string
}

func newRedriveAdmin(t *testing.T) redriveAdmin {
	t.Helper()
	a := redriveAdmin{db: sqldbtest.New(t, "order")}
	ns := rabbittest.Namespace(t)
	topo := rabbittest.Topology(t, ns, rabbit.Queue{Name: "order.saga-results", Keys: []string{events.PaymentSucceeded}})
	conn := rabbittest.Conn(t, topo)
	a.queue = topo.Queues[0].Name
	pub := conn.NewPublisher()
	t.Cleanup(pub.Close)
	h := &admin.Handler{DB: a.db.DB, Log: quiet, Redriver: &deadletter.Redriver{DB: a.db.DB, Publisher: pub, Log: quiet,
		QueueOf: func(c string) (string, bool) { return a.queue, c == "order" }}}
	r := chi.NewRouter()
	r.Route("/admin", func(ar chi.Router) {
		ar.Use(admin.RequireToken("secret", false))
		h.Routes(ar)
	})
	a.router = r
	return a
}

// deadPayment records a dead letter of consumer "order": a
// payment.succeeded of order 77 with payload, failed for reason. It
// returns the event.
func (a redriveAdmin) deadPayment(t *testing.T, payload, reason string) events.Envelope {
	t.Helper()
	e := events.Envelope{EventID: uuid.NewString(), Type: events.PaymentSucceeded, AggregateID: 77, AggregateVersion: 3,
		SchemaVersion: 1, CorrelationID: "77", OccurredAt: time.Now().Add(-time.Minute).Truncate(time.Second),
		Payload: []byte(payload)}
	msg := rabbit.FromEnvelope("", e).Publishing
	headers, _ := json.Marshal(msg.Headers)
	ct := msg.ContentType
	if err := deadletter.Record(context.Background(), a.db.DB, deadletter.Letter{Consumer: "order", EventID: e.EventID,
		EventType: e.Type, Reason: reason, Headers: headers, Payload: e.Payload, ContentType: &ct, MessageTimestamp: &e.OccurredAt}); err != nil {
		t.Fatal(err)
	}
	return e
}

func jsonNumber(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// failing answers every publish with a nack: the outbox's attempts fail.
type failing struct{}

func (failing) Publish(_ context.Context, msgs []rabbit.Message, _ time.Duration) []error {
	errs := make([]error, len(msgs))
	for i := range errs {
		errs[i] = rabbit.ErrNacked
	}
	return errs
}
func (failing) Close() {}

// An operator's retry gives a failed event a fresh round of attempts and
// keeps its history: GET /admin/outbox still shows how often it was tried
// (total_attempts) and how often it was put back (requeues).
func TestOutboxRetryKeepsTheHistory(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	ctx := context.Background()
	var id string
	err := sqldb.WithTx(ctx, db.DB, func(tx *sqlx.Tx) error {
		ids, err := outbox.Add(ctx, tx, outbox.Event{AggregateID: 5, AggregateVersion: 1, Type: events.OrderCreated, Payload: map[string]string{"order_id": "5"}})
		id = ids[0]
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	d := outbox.New(db.DB, outbox.Config{Exchange: "x", Log: quiet, MaxAttempts: 3,
		Backoff: retry.Backoff{Base: time.Millisecond, Cap: time.Millisecond}})
	dispatch := func() { // one failed attempt, once the event is due
		t.Helper()
		testutil.WaitFor(t, 5*time.Second, "the event to come due", func() bool {
			res, err := d.DispatchOnce(ctx, failing{})
			if err != nil {
				t.Fatal(err)
			}
			return res.Claimed == 1
		})
	}
	for range 3 {
		dispatch()
	}
	r := chi.NewRouter()
	r.Route("/admin", (&admin.Handler{DB: db.DB, Log: quiet}).Routes)
	row := func() map[string]any {
		t.Helper()
		code, out := call(t, r, http.MethodGet, "/admin/outbox?aggregate_id=5", "")
		rows, _ := out["events"].([]any)
		if code != http.StatusOK || len(rows) != 1 {
			t.Fatalf("GET /admin/outbox: %d %v, want the one event", code, out)
		}
		return rows[0].(map[string]any)
	}
	if got := row(); got["status"] != "failed" || got["attempts"] != float64(3) || got["total_attempts"] != float64(3) {
		t.Fatalf("before the retry: %v, want failed after 3 attempts, 3 in all", got)
	}
	if code, out := call(t, r, http.MethodPost, "/admin/outbox/"+id+"/retry", ""); code != http.StatusOK {
		t.Fatalf("retry: %d %v", code, out)
	}
	if got := row(); got["status"] != "pending" || got["attempts"] != float64(0) || got["total_attempts"] != float64(3) || got["requeues"] != float64(1) {
		t.Fatalf("after the retry: %v, want pending with a fresh round (0 attempts) and the history: 3 attempts in all, 1 requeue", got)
	}
	dispatch()
	if got := row(); got["attempts"] != float64(1) || got["total_attempts"] != float64(4) || got["requeues"] != float64(1) {
		t.Fatalf("after one more attempt: %v, want 1 attempt in this round, 4 in all, 1 requeue", got)
	}
}
