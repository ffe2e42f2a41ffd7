package watermillpeer_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jmoiron/sqlx"

	peer "github.com/relmsg/ordersaga/bench/peers/watermill"
	"github.com/relmsg/ordersaga/internal/benchtest"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

var quiet = slog.New(slog.DiscardHandler)

// world is what each side gets: a fresh database with the order service's
// schema (our outbox_events; the peer adds its own tables) and a broker
// namespace with one durable quorum queue, "bench.events", bound to
// order.created, the kind of queue every saga queue is. declare declares
// the exchanges and, with the queue, the queue and its binding.
type world struct {
	db    *sqldbtest.DB
	ns    rabbit.Namespace
	topo  rabbit.Topology
	queue string
}

func newWorld(t testing.TB) *world {
	t.Helper()
	w := &world{db: sqldbtest.New(t, "order"), ns: rabbittest.Namespace(t)}
	w.topo = rabbittest.Topology(t, w.ns, rabbit.Queue{Name: "bench.events", Keys: []string{events.OrderCreated}, DeliveryLimit: 20})
	w.queue = w.topo.Queues[0].Name
	return w
}

// declare declares the namespace's exchanges and, withQueue, the queue
// bound to order.created. Without it, order.created is unroutable.
func (w *world) declare(t testing.TB, withQueue bool) {
	t.Helper()
	topo := w.topo
	if !withQueue {
		topo.Queues = nil
	}
	conn := rabbittest.Dial(t)
	defer conn.Close()
	if err := topo.Declare(conn); err != nil {
		t.Fatalf("declare topology: %v", err)
	}
}

// queueDepth is the number of ready messages in the queue.
func (w *world) queueDepth(t testing.TB) int { return benchtest.QueueDepth(t, w.queue) }

// purge empties the queue after a warm-up.
func (w *world) purge(t testing.TB) { benchtest.Purge(t, w.queue) }

// forward starts a Forwarder on the peer's outbox in db that publishes
// through a recorder around pub (done after target successes), and stops
// it at cleanup.
func forward(t testing.TB, db *sqlx.DB, s peer.SQL, pub message.Publisher, target int) *recorder {
	t.Helper()
	rec := newRecorder(pub, target)
	fwd, err := peer.NewForwarder(db.DB, s, rec, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	stop, err := peer.Start(context.Background(), fwd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	return rec
}

// prefillPeer commits n OrderCreated events (ids first+1 .. first+n) into
// the peer's outbox with its forwarder publisher, 500 per transaction.
func prefillPeer(t testing.TB, db *sqlx.DB, s peer.SQL, first, n int) {
	t.Helper()
	for done := 0; done < n; {
		batch := min(500, n-done)
		evs := make([]events.Envelope, batch)
		for i := range evs {
			evs[i] = benchtest.Envelope(uint64(first + done + i + 1))
		}
		writePeer(t, db, s, evs...)
		done += batch
	}
}

// writePeer commits evs into the peer's outbox in one transaction.
func writePeer(t testing.TB, db *sqlx.DB, s peer.SQL, evs ...events.Envelope) {
	t.Helper()
	tx, err := db.DB.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := peer.Write(tx, s, evs...); err != nil {
		_ = tx.Rollback()
		t.Fatalf("peer outbox write: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("peer outbox commit: %v", err)
	}
}

// recorder wraps the Forwarder's AMQP publisher and records what Publish
// returned for each message (by message UUID, the event id: the Forwarder
// has unwrapped it by then). The Forwarder's handler succeeds exactly when
// this Publish does.
type recorder struct {
	message.Publisher
	mu      sync.Mutex
	results map[string][]error
	ok      int
	target  int
	done    chan struct{} // closed when ok reaches target
}

func newRecorder(pub message.Publisher, target int) *recorder {
	return &recorder{Publisher: pub, results: map[string][]error{}, target: target, done: make(chan struct{})}
}

func (r *recorder) Publish(topic string, msgs ...*message.Message) error {
	err := r.Publisher.Publish(topic, msgs...)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		r.results[m.UUID] = append(r.results[m.UUID], err)
		if err == nil {
			r.ok++
			if r.ok == r.target {
				close(r.done)
			}
		}
	}
	return err
}

func (r *recorder) of(id string) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.results[id]...)
}
