// Package inboxtest holds the fixtures of the tests that run a consumer
// (pkg/inbox, pkg/deadletter, pkg/ordering): a migrated database whose
// business table is one counter, a handler that increments it, and a
// consume loop on a real queue of its own.
package inboxtest

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/deadletter"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/inbox/batch"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

var quiet = slog.New(slog.DiscardHandler)

// ErrLockWait is what a handler returns to simulate a transient failure.
var ErrLockWait = errors.New("Error 1205: Lock wait timeout exceeded")

// DB is a migrated database plus a tiny business table: the handler's
// "effect" is one increment of counters.n (Increment, Effects), and
// unique_things lets a handler raise a business duplicate key.
func DB(t testing.TB) *sqldbtest.DB {
	t.Helper()
	db := sqldbtest.New(t, "inventory")
	db.MustExec(`CREATE TABLE counters (name VARCHAR(20) PRIMARY KEY, n INT NOT NULL)`)
	db.MustExec(`INSERT INTO counters VALUES ('effects', 0)`)
	db.MustExec(`CREATE TABLE unique_things (thing VARCHAR(20) PRIMARY KEY)`)
	return db
}

// Effects returns how many effects committed.
func Effects(t testing.TB, db *sqlx.DB) int {
	t.Helper()
	var n int
	if err := db.Get(&n, `SELECT n FROM counters WHERE name = 'effects'`); err != nil {
		t.Fatal(err)
	}
	return n
}

// WantEffects fails the test unless exactly want effects committed.
func WantEffects(t testing.TB, db *sqlx.DB, want int) {
	t.Helper()
	if got := Effects(t, db); got != want {
		t.Fatalf("effects = %d, want %d", got, want)
	}
}

// Increment is a Handler whose business change is one effect.
func Increment(ctx context.Context, tx *sqlx.Tx, _ events.Envelope) error {
	_, err := tx.ExecContext(ctx, `UPDATE counters SET n = n + 1 WHERE name = 'effects'`)
	return err
}

// InboxRows counts the inbox rows of eventID, every consumer's.
func InboxRows(t testing.TB, db *sqlx.DB, eventID string) int {
	t.Helper()
	var n int
	if err := db.Get(&n, `SELECT COUNT(*) FROM consumer_inbox WHERE event_id = ?`, eventID); err != nil {
		t.Fatal(err)
	}
	return n
}

// Corrects records what each event a handler was given corrects: its
// corrects_event_id header, "" for an event that corrects none.
type Corrects struct {
	mu sync.Mutex
	of map[string]string // event id -> the event it corrects
}

// Record is h, recording what each event corrects before handling it.
func (c *Corrects) Record(h inbox.Handler) inbox.Handler {
	return func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
		c.mu.Lock()
		if c.of == nil {
			c.of = map[string]string{}
		}
		c.of[e.EventID] = e.CorrectsEventID
		c.mu.Unlock()
		return h(ctx, tx, e)
	}
}

// Of returns what the event eventID corrects, as its handler saw it, and
// whether a handler saw it at all.
func (c *Corrects) Of(eventID string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	corrects, ok := c.of[eventID]
	return corrects, ok
}

// WantInboxRows fails the test unless eventID has want inbox rows.
func WantInboxRows(t testing.TB, db *sqlx.DB, eventID string, want int) {
	t.Helper()
	if got := InboxRows(t, db, eventID); got != want {
		t.Fatalf("inbox rows of %s = %d, want %d", eventID, got, want)
	}
}

// Event is a new valid event of type typ for order 1.
func Event(typ string) events.Envelope {
	return events.Envelope{EventID: uuid.NewString(), Type: typ, AggregateID: 1, AggregateVersion: 1,
		SchemaVersion: 1, Payload: []byte(`{"order_id":"1"}`)}
}

// Message is e as the outbox publishes it.
func Message(e events.Envelope) amqp.Publishing {
	return rabbit.FromEnvelope("", e).Publishing
}

// Delivery is e as the consume loop hands it to a handler reading queue,
// on its first delivery: for tests that call Handle or HandleBatch
// directly.
func Delivery(queue string, e events.Envelope) rabbit.Delivery {
	m := rabbit.FromEnvelope("saga.events", e)
	return rabbit.Delivery{Queue: queue, Attempt: 1, Delivery: amqp.Delivery{
		MessageId: m.Publishing.MessageId, Type: m.Publishing.Type, ContentType: m.Publishing.ContentType,
		Headers: m.Publishing.Headers, Body: m.Publishing.Body, RoutingKey: m.RoutingKey,
	}}
}

// TestConsumer is a consumer of the tests: the chapter's (pkg/inbox), and
// its batch layer (pkg/inbox/batch) for HandleBatch. The handlers of these
// tests write straight to the transaction: their store is the *sqlx.Tx.
type TestConsumer struct {
	*inbox.Consumer
	Batch *batch.Consumer[*sqlx.Tx]
}

// HandleBatch is the batch layer's rabbit.BatchHandler.
func (c TestConsumer) HandleBatch(ctx context.Context, ds []rabbit.Delivery) []rabbit.Decision {
	return c.Batch.HandleBatch(ctx, ds)
}

// Consumer is a consumer named name that handles order.created with h.
func Consumer(db *sqlx.DB, name string, h inbox.Handler) TestConsumer {
	c, _ := Metered(db, name, h)
	return c
}

// Metered is Consumer with its metrics on a registry of its own (read them
// with Counter).
func Metered(db *sqlx.DB, name string, h inbox.Handler) (TestConsumer, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	return Made(inbox.Config{Name: name, DB: db, Metrics: inbox.NewMetrics(reg)}, OnCreated(h), batch.NewMetrics(reg)), reg
}

// OnCreated is h as the handler of order.created.
func OnCreated(h inbox.Handler) batch.Handlers[*sqlx.Tx] {
	return batch.Handlers[*sqlx.Tx]{Plain: map[events.Type]batch.Handler[*sqlx.Tx]{events.OrderCreated: batch.Handler[*sqlx.Tx](h)}}
}

// Made is a test consumer of cfg (quiet unless it has a logger) with
// handlers written against the transaction itself, and batch metrics m
// (nil: none).
func Made(cfg inbox.Config, hs batch.Handlers[*sqlx.Tx], m *batch.Metrics) TestConsumer {
	if cfg.Log == nil {
		cfg.Log = quiet
	}
	hs.Direct = func(tx *sqlx.Tx) *sqlx.Tx { return tx }
	hs.Batched = func(b *batch.Tx) *sqlx.Tx { return b.Tx }
	c, b := batch.New(cfg, hs, batch.Options{Metrics: m})
	return TestConsumer{Consumer: c, Batch: b}
}

// Broker is a queue of its own, bound to order.created, with a consume loop
// on it.
type Broker struct {
	NS    rabbit.Namespace
	Conn  *rabbit.Conn
	Queue string
}

// Consume runs h on a new queue with workers workers (0: the consume loop's
// default) until the test ends.
func Consume(t testing.TB, h rabbit.Handler, workers int) *Broker {
	t.Helper()
	return ConsumeBatch(t, func(ctx context.Context, ds []rabbit.Delivery) []rabbit.Decision {
		return []rabbit.Decision{h(ctx, ds[0])}
	}, workers, 1)
}

// Incrementing is the common setting of a test: a database (DB) and a
// consume loop on a queue of its own of consumer "inventory", which applies
// each event as one Increment; reg holds the consumer's metrics.
func Incrementing(t testing.TB) (db *sqldbtest.DB, reg *prometheus.Registry, b *Broker) {
	t.Helper()
	db = DB(t)
	c, reg := Metered(db.DB, "inventory", Increment)
	return db, reg, Consume(t, c.Handle, 0)
}

// Batches are the CONSUMER_BATCH values the consumer tests run at: 1, the
// chapter's one transaction per message, and 16, the default.
var Batches = []int{1, 16}

// EachBatch runs test at each of Batches, as parallel subtests named
// batch=N: the chapter's path and the batched one must pass the same checks.
func EachBatch(t *testing.T, test func(t *testing.T, batch int)) {
	t.Helper()
	for _, batch := range Batches {
		t.Run("batch="+strconv.Itoa(batch), func(t *testing.T) {
			t.Parallel()
			test(t, batch)
		})
	}
}

// ConsumeBatch is Consume with a batch handler (the consumer's HandleBatch)
// taking up to batch deliveries at once.
func ConsumeBatch(t testing.TB, h rabbit.BatchHandler, workers, batch int) *Broker {
	t.Helper()
	b := &Broker{NS: rabbittest.Namespace(t)}
	topo := rabbittest.Topology(t, b.NS, rabbit.Queue{Name: "inventory.order-events", Keys: []string{events.OrderCreated}})
	b.Conn = rabbittest.Conn(t, topo)
	b.Queue = topo.Queues[0].Name
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.Conn.ConsumeBatch(ctx, rabbit.ConsumeConfig{Queue: b.Queue, Workers: workers, Batch: batch, Log: quiet}, h)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return b
}

// ConsumeDead runs h (the consumer's HandleBrokerDeadLetter) on the queue's
// broker-side dead-letter queue until the test ends, as pkg/compose/process does.
func (b *Broker) ConsumeDead(t testing.TB, h rabbit.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		dead := rabbit.Queue{Name: b.Queue}.DeadQueue()
		_ = b.Conn.Consume(ctx, rabbit.ConsumeConfig{Queue: dead, Workers: 1, Log: quiet}, h)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// Publish publishes p through the exchange as an order.created event.
func (b *Broker) Publish(t testing.TB, p amqp.Publishing) {
	t.Helper()
	msg := rabbit.Message{Exchange: b.NS.Exchange(), RoutingKey: events.OrderCreated, Publishing: p}
	pub := b.Conn.NewPublisher()
	defer pub.Close()
	if err := pub.Publish(context.Background(), []rabbit.Message{msg}, 5*time.Second)[0]; err != nil {
		t.Fatal(err)
	}
}

// Account is a database account of its own on one test database: a
// consumer connected through it loses its database when the test says so,
// while the test itself (root) keeps reading the tables.
type Account struct {
	DB   *sqlx.DB // the account's pool: give it to the consumer
	root *sqlx.DB
	user string
}

// NewAccount creates the account with every privilege on db's schema and
// drops it when the test ends.
func NewAccount(t testing.TB, db *sqldbtest.DB) *Account {
	t.Helper()
	a := &Account{root: db.DB, user: "t_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "")}
	ctx := context.Background()
	for _, q := range []string{
		"CREATE USER " + a.quoted() + " IDENTIFIED BY 'pw'",
		"GRANT ALL PRIVILEGES ON " + sqldb.QuoteIdent(db.Name) + ".* TO " + a.quoted(),
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("the test server account must be able to create users: %s: %v", q, err)
		}
	}
	t.Cleanup(func() { _, _ = a.root.ExecContext(context.Background(), "DROP USER IF EXISTS "+a.quoted()) })
	mc, err := mysql.ParseDSN(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	mc.User, mc.Passwd = a.user, "pw"
	if a.DB, err = sqldb.Open(ctx, sqldb.Config{DSN: mc.FormatDSN(), MaxOpenConns: 4}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.DB.Close() })
	return a
}

func (a *Account) quoted() string { return "'" + a.user + "'@'%'" }

// Lock takes the database away from the account, as an outage would for
// its service: new connections are refused (ACCOUNT LOCK) and its open
// sessions are killed.
func (a *Account) Lock(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	if _, err := a.root.ExecContext(ctx, "ALTER USER "+a.quoted()+" ACCOUNT LOCK"); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	if err := a.root.SelectContext(ctx, &ids, `SELECT id FROM information_schema.processlist WHERE user = ?`, a.user); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		_, _ = a.root.ExecContext(ctx, "KILL CONNECTION ?", id) // gone already: fine
	}
}

// Unlock gives the database back.
func (a *Account) Unlock(t testing.TB) {
	t.Helper()
	if _, err := a.root.ExecContext(context.Background(), "ALTER USER "+a.quoted()+" ACCOUNT UNLOCK"); err != nil {
		t.Fatal(err)
	}
}

// WaitFor polls cond until it holds, and fails the test after 15 seconds.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// DeadLetter returns the dead letter of (consumer, eventID), or ok=false.
func DeadLetter(t testing.TB, db *sqlx.DB, consumer, eventID string) (dl deadletter.Letter, ok bool) {
	t.Helper()
	dls, err := deadletter.List(context.Background(), db, deadletter.Filter{Consumer: consumer, EventID: eventID, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) == 0 {
		return deadletter.Letter{}, false
	}
	return dls[0], true
}

// WaitDeadLetter waits until (consumer, eventID) is a dead letter in status
// dead, and returns it.
func WaitDeadLetter(t testing.TB, db *sqlx.DB, consumer, eventID string) deadletter.Letter {
	t.Helper()
	var dl deadletter.Letter
	WaitFor(t, "dead letter of "+eventID, func() bool {
		var ok bool
		dl, ok = DeadLetter(t, db, consumer, eventID)
		return ok && dl.Status == deadletter.StatusDead
	})
	return dl
}

// Counter reads one counter of reg, by name and consumer label (0 when
// absent).
func Counter(t testing.TB, reg *prometheus.Registry, name, consumer string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "consumer" && l.GetValue() == consumer {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// WantCounter fails the test unless the counter of reg named name, for
// consumer, is want.
func WantCounter(t testing.TB, reg *prometheus.Registry, name, consumer string, want float64) {
	t.Helper()
	if got := Counter(t, reg, name, consumer); got != want {
		t.Fatalf("%s{consumer=%q} = %v, want %v", name, consumer, got, want)
	}
}
