package watermillpeer_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	amqp "github.com/rabbitmq/amqp091-go"

	peer "github.com/relmsg/ordersaga/bench/peers/watermill"
	"github.com/relmsg/ordersaga/internal/benchtest"
	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

// The same situation on both sides: the exchange exists, but no queue is
// bound to order.created yet (a consumer not deployed, a binding
// forgotten). An event is committed; then the queue is bound and a second
// event is committed. Both messages are published persistent and
// mandatory, with publisher confirms.
//
// The Forwarder publishes the first with mandatory set, the broker returns
// it and then acks it, and because watermill-amqp never listens for
// returns the ack alone decides: the handler succeeds, the row is acked
// (the offset passes it, or the row is deleted) and the event is never
// sent again. Only the second event reaches the queue.
//
// Our dispatcher sees the return (rabbit.Publisher drains NotifyReturn
// before it trusts an ack), keeps the event 'pending' with a backoff, and
// delivers it once the queue is bound; if it never becomes routable the
// event ends 'failed', kept for an operator.
func TestUnroutableEvent(t *testing.T) {
	for _, c := range []struct {
		name string
		sql  peer.SQL
		// passed reports whether the peer's outbox no longer holds offset
		// as work to do.
		passed func(t *testing.T, db *sqlx.DB, offset int64) bool
	}{
		{"forwarder/documented-offsets", peer.Documented(0), func(t *testing.T, db *sqlx.DB, offset int64) bool {
			var acked int64
			const q = "SELECT COALESCE(MAX(offset_acked), 0) FROM `watermill_offsets_" + peer.Topic + "`"
			if err := db.Get(&acked, q); err != nil {
				t.Fatal(err)
			}
			return acked >= offset
		}},
		{"forwarder/queue-delete-on-ack", peer.QueueDeleteOnAck(0), func(t *testing.T, db *sqlx.DB, offset int64) bool {
			var n int
			const q = "SELECT COUNT(*) FROM `watermill_" + peer.Topic + "` WHERE `offset` = ?"
			if err := db.Get(&n, q, offset); err != nil {
				t.Fatal(err)
			}
			return n == 0
		}},
	} {
		t.Run(c.name, func(t *testing.T) { forwarderLosesTheUnroutable(t, c.sql, c.passed) })
	}

	t.Run("ours/retried-then-delivered", oursRetriesThenDelivers)
	t.Run("ours/never-routable-is-kept-failed", oursKeepsTheUnroutableFailed)
}

// forwarderLosesTheUnroutable: the Forwarder takes the broker's ack of a
// returned message for a delivery, passes the row and never sends it
// again; passed tells whether the peer's outbox still holds an offset.
func forwarderLosesTheUnroutable(t *testing.T, sqlOf peer.SQL, passed func(t *testing.T, db *sqlx.DB, offset int64) bool) {
	t.Parallel()
	w := newWorld(t)
	w.declare(t, false)
	pub, err := peer.NewAMQPPublisher(rabbittest.URL(), w.ns.Exchange())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	if err := peer.InitSchema(w.db.DB.DB, sqlOf); err != nil {
		t.Fatal(err)
	}

	lost := benchtest.Envelope(1)
	writePeer(t, w.db.DB, sqlOf, lost)
	var lostOffset int64
	if err := w.db.Get(&lostOffset, "SELECT MAX(`offset`) FROM `watermill_"+peer.Topic+"`"); err != nil {
		t.Fatal(err)
	}
	rec := forward(t, w.db.DB, sqlOf, pub, 2)

	testutil.WaitFor(t, 10*time.Second, "the peer to ack the unroutable event in its outbox", func() bool {
		return passed(t, w.db.DB, lostOffset)
	})
	if got := rec.of(lost.EventID); len(got) != 1 || got[0] != nil {
		t.Fatalf("forwarding of the unroutable event returned %v, want exactly one success (the return is not seen)", got)
	}

	w.declare(t, true)
	second := benchtest.Envelope(2)
	writePeer(t, w.db.DB, sqlOf, second)
	got := rabbittest.Drain(t, w.queue, 1, 10*time.Second)
	if ids := messageIDs(got); !slices.Equal(ids, []string{second.EventID}) {
		t.Fatalf("queue holds %v, want only the second event %s: the first is lost", ids, second.EventID)
	}
	if !passed(t, w.db.DB, lostOffset) {
		t.Fatal("the outbox holds the unroutable event again")
	}
	if got := rec.of(lost.EventID); len(got) != 1 {
		t.Fatalf("the unroutable event was forwarded %d times, want once and never again", len(got))
	}
}

// oursRetriesThenDelivers: the return is seen, the event kept pending with a
// backoff and delivered once the queue is bound.
func oursRetriesThenDelivers(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.declare(t, false)
	d, pub := ourDispatcher(t, w, noQueue(w), outbox.Config{Backoff: quickBackoff})
	ctx := context.Background()

	lost := benchtest.Prefill(t, w.db.DB, 0, 1)[0]
	res, err := d.DispatchOnce(ctx, pub)
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed != 1 || res.Sent != 0 || res.Retried != 1 {
		t.Fatalf("first attempt = %+v, want claimed 1, sent 0, retried 1 (the return was seen)", res)
	}
	if st, attempts := status(t, w.db.DB, lost); st != "pending" || attempts != 1 {
		t.Fatalf("unroutable event is %s after %d attempts, want pending after 1", st, attempts)
	}

	w.declare(t, true)
	second := benchtest.Prefill(t, w.db.DB, 1, 1)[0]
	sent := 0
	testutil.WaitFor(t, 10*time.Second, "both events sent", func() bool {
		res, err := d.DispatchOnce(ctx, pub)
		if err != nil {
			t.Fatal(err)
		}
		sent += res.Sent
		return sent == 2
	})
	got := messageIDs(rabbittest.Drain(t, w.queue, 2, 10*time.Second))
	slices.Sort(got)
	want := []string{lost, second}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("queue holds %v, want both events %v", got, want)
	}
	for _, id := range want {
		if st, _ := status(t, w.db.DB, id); st != "sent" {
			t.Fatalf("event %s is %s, want sent", id, st)
		}
	}
}

// oursKeepsTheUnroutableFailed: an event never routable ends failed after
// MaxAttempts, kept in outbox_events, never sent.
func oursKeepsTheUnroutableFailed(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.declare(t, false)
	d, pub := ourDispatcher(t, w, noQueue(w), outbox.Config{MaxAttempts: 2, Backoff: quickBackoff})

	id := benchtest.Prefill(t, w.db.DB, 0, 1)[0]
	var total outbox.Result
	testutil.WaitFor(t, 10*time.Second, "the event failed", func() bool {
		res, err := d.DispatchOnce(context.Background(), pub)
		if err != nil {
			t.Fatal(err)
		}
		total.Sent += res.Sent
		total.Retried += res.Retried
		total.Failed += res.Failed
		return total.Failed == 1
	})
	if total.Sent != 0 || total.Retried != 1 {
		t.Fatalf("attempts = %+v, want 1 retried then 1 failed, never sent", total)
	}
	if st, attempts := status(t, w.db.DB, id); st != "failed" || attempts != 2 {
		t.Fatalf("event is %s after %d attempts, want failed after 2, kept in outbox_events", st, attempts)
	}
}

// ourDispatcher is our outbox dispatcher on w's database, publishing to
// w's exchange with one confirming publisher on a connection that declares
// topo; cfg gives the rest of its settings.
func ourDispatcher(t *testing.T, w *world, topo rabbit.Topology, cfg outbox.Config) (*outbox.Dispatcher, outbox.Publisher) {
	t.Helper()
	conn := rabbittest.Conn(t, topo)
	cfg.Exchange, cfg.Log = w.ns.Exchange(), quiet
	pub := outbox.RabbitPublishers(conn)()
	t.Cleanup(pub.Close)
	return outbox.New(w.db.DB, cfg), pub
}

// noQueue is w's topology without its queue: the exchange exists, nothing
// is bound to it yet.
func noQueue(w *world) rabbit.Topology {
	return rabbit.Topology{Exchange: w.topo.Exchange, DeadLetterExchange: w.topo.DeadLetterExchange}
}

// quickBackoff retries at once, so a test sees several attempts in a
// second.
var quickBackoff = retry.Backoff{Base: 20 * time.Millisecond, Cap: 20 * time.Millisecond}

// status reads one event's status and attempts from outbox_events.
func status(t *testing.T, db *sqlx.DB, id string) (string, int) {
	t.Helper()
	var r struct {
		Status   string `db:"status"`
		Attempts int    `db:"attempts"`
	}
	if err := db.Get(&r, `SELECT status, attempts FROM outbox_events WHERE event_id = ?`, id); err != nil {
		t.Fatalf("event %s: %v", id, err)
	}
	return r.Status, r.Attempts
}

func messageIDs(ds []amqp.Delivery) []string {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.MessageId
	}
	return ids
}

// An event the broker refuses (it nacks: the only queue bound to its
// routing key is full and rejects new messages) committed before a
// routable one.
//
// The Forwarder's subscriber hands over the next row only after the
// current one is acked (Subscriber.sendMessage in watermill-sql's
// pkg/sql/subscriber.go): a nacked row is offered again every
// ResendInterval (1 s) and every row behind it waits, however healthy.
// Our dispatcher records the failure on that event alone (back to
// 'pending' with a backoff, 'failed' after MaxAttempts) and sends the rest
// of the batch.
func TestRefusedEvent(t *testing.T) {
	t.Run("forwarder/blocks-the-rows-behind-it", forwarderBlocksBehindTheRefused)
	t.Run("ours/sends-the-rest", oursSendsTheRest)
}

// bindRefusingQueue binds a queue that nacks every new message to
// payment.refunded: the broker confirms it with basic.nack.
func bindRefusingQueue(t *testing.T, w *world) {
	t.Helper()
	full := w.ns.Queue("full")
	t.Cleanup(func() {
		rabbittest.Channel(t, func(ch *amqp.Channel) error {
			_, err := ch.QueueDelete(full, false, false, false)
			return err
		})
	})
	rabbittest.Channel(t, func(ch *amqp.Channel) error {
		args := amqp.Table{"x-max-length": int64(0), "x-overflow": "reject-publish"}
		if _, err := ch.QueueDeclare(full, false, false, false, false, args); err != nil {
			return err
		}
		return ch.QueueBind(full, events.PaymentRefunded, w.ns.Exchange(), false, nil)
	})
}

// forwarderBlocksBehindTheRefused: the refused row is offered again and
// again, and the healthy one behind it waits.
func forwarderBlocksBehindTheRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.declare(t, true)
	bindRefusingQueue(t, w)
	// This publisher is not closed: the Forwarder's Close can return
	// while the refused event's forward is still in flight (seen here:
	// a Publish ending after Close returned), and closing watermill-amqp's
	// connection during a Publish is a data race inside it
	// (ConnectionWrapper.connected, pkg/amqp/connection.go). The test
	// binary's exit closes the connection.
	pub, err := peer.NewAMQPPublisher(rabbittest.URL(), w.ns.Exchange())
	if err != nil {
		t.Fatal(err)
	}
	s := peer.Documented(0)
	if err := peer.InitSchema(w.db.DB.DB, s); err != nil {
		t.Fatal(err)
	}
	refused := benchtest.Envelope(1)
	refused.Type = events.PaymentRefunded
	healthy := benchtest.Envelope(2)
	writePeer(t, w.db.DB, s, refused)
	writePeer(t, w.db.DB, s, healthy)

	rec := forward(t, w.db.DB, s, pub, 1)

	testutil.WaitFor(t, 10*time.Second, "the refused event to be offered twice", func() bool {
		return len(rec.of(refused.EventID)) >= 2
	})
	for _, err := range rec.of(refused.EventID) {
		if err == nil {
			t.Fatal("the refused event was confirmed; the broker should nack it")
		}
	}
	if got := rec.of(healthy.EventID); len(got) != 0 {
		t.Fatalf("the healthy event was published (%v) while the refused one ahead of it was still failing", got)
	}
	if depth := w.queueDepth(t); depth != 0 {
		t.Fatalf("queue depth = %d, want 0: the healthy event waits behind the refused one", depth)
	}
}

// oursSendsTheRest: the refused event backs off alone; the rest of the
// batch is sent.
func oursSendsTheRest(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.declare(t, true)
	bindRefusingQueue(t, w)
	d, pub := ourDispatcher(t, w, w.topo, outbox.Config{})

	var ids []string
	err := sqldb.WithTx(context.Background(), w.db.DB, func(tx *sqlx.Tx) error {
		var err error
		ids, err = outbox.Add(context.Background(), tx,
			outbox.Event{AggregateID: 1, AggregateVersion: 1, Type: events.PaymentRefunded, Payload: benchtest.OrderCreated(1)},
			outbox.Event{AggregateID: 2, AggregateVersion: 1, Type: events.OrderCreated, Payload: benchtest.OrderCreated(2)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.DispatchOnce(context.Background(), pub)
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed != 2 || res.Sent != 1 || res.Retried != 1 {
		t.Fatalf("batch = %+v, want claimed 2, sent 1 (the healthy one), retried 1 (the refused one)", res)
	}
	if st, attempts := status(t, w.db.DB, ids[0]); st != "pending" || attempts != 1 {
		t.Fatalf("refused event is %s after %d attempts, want pending (backing off) after 1", st, attempts)
	}
	got := messageIDs(rabbittest.Drain(t, w.queue, 1, 10*time.Second))
	if !slices.Equal(got, ids[1:]) {
		t.Fatalf("queue holds %v, want the healthy event %s", got, ids[1])
	}
}
