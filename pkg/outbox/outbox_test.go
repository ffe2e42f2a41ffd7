package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

var quiet = slog.New(slog.DiscardHandler)

// row is what a test reads back from outbox_events.
type row struct {
	EventID       string     `db:"event_id"`
	Status        string     `db:"status"`
	Attempts      int        `db:"attempts"`
	ClaimToken    *string    `db:"claim_token"`
	LeaseUntil    *time.Time `db:"lease_until"`
	SentAt        *time.Time `db:"sent_at"`
	NextAttemptAt time.Time  `db:"next_attempt_at"`
}

func readRows(t *testing.T, db *sqlx.DB) map[string]row {
	t.Helper()
	var rows []row
	const q = `SELECT event_id, status, attempts, claim_token, lease_until, sent_at, next_attempt_at FROM outbox_events`
	if err := db.Select(&rows, q); err != nil {
		t.Fatal(err)
	}
	m := map[string]row{}
	for _, r := range rows {
		m[r.EventID] = r
	}
	return m
}

// wantNoEvents checks that the outbox holds no event: nothing was
// committed.
func wantNoEvents(t *testing.T, db *sqlx.DB) {
	t.Helper()
	if n := len(readRows(t, db)); n != 0 {
		t.Fatalf("outbox rows = %d, want 0", n)
	}
}

// addEvents commits n events of type typ for aggregates 1..n.
func addEvents(t *testing.T, db *sqlx.DB, typ string, n int) []string {
	t.Helper()
	var ids []string
	err := sqldb.WithTx(context.Background(), db, func(tx *sqlx.Tx) error {
		for i := 1; i <= n; i++ {
			got, err := outbox.Add(context.Background(), tx, outbox.Event{
				AggregateID: uint64(i), AggregateVersion: 1, Type: typ,
				Payload: map[string]any{"order_id": fmt.Sprint(i)},
			})
			if err != nil {
				return err
			}
			ids = append(ids, got...)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// addOne adds one event in tx, the business change's transaction.
func addOne(ctx context.Context, tx *sqlx.Tx) error {
	_, err := outbox.Add(ctx, tx, outbox.Event{AggregateID: 7, AggregateVersion: 1, Type: events.OrderCreated, Payload: map[string]int{"x": 1}})
	return err
}

type fixture struct {
	db    *sqldbtest.DB
	ns    rabbit.Namespace
	topo  rabbit.Topology
	conn  *rabbit.Conn
	queue string
}

// newFixture: a database, a namespace with one queue bound to "order.created".
func newFixture(t *testing.T, queues ...rabbit.Queue) *fixture {
	t.Helper()
	if len(queues) == 0 {
		queues = []rabbit.Queue{{Name: "probe.events", Keys: []string{events.OrderCreated}}}
	}
	f := &fixture{db: sqldbtest.New(t, "order"), ns: rabbittest.Namespace(t)}
	f.topo = rabbittest.Topology(t, f.ns, queues...)
	f.conn = rabbittest.Conn(t, f.topo)
	f.queue = f.topo.Queues[0].Name
	return f
}

func (f *fixture) dispatcher(cfg outbox.Config) *outbox.Dispatcher {
	cfg.Exchange = f.ns.Exchange()
	if cfg.NewPublisher == nil {
		cfg.NewPublisher = func() outbox.Publisher { return f.conn.NewPublisher() }
	}
	cfg.Log = quiet
	return outbox.New(f.db.DB, cfg)
}

func TestAddRollbackLeavesNoEvent(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	ctx := context.Background()
	boom := errors.New("business step failed")
	err := sqldb.WithTx(ctx, db.DB, func(tx *sqlx.Tx) error {
		if err := addOne(ctx, tx); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want %v", err, boom)
	}
	wantNoEvents(t, db.DB)
}

func TestAddCommitFailureIsReported(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	ctx := context.Background()
	err := sqldb.WithTx(ctx, db.DB, func(tx *sqlx.Tx) error {
		if err := addOne(ctx, tx); err != nil {
			return err
		}
		return db.KillSession(ctx, tx) // the COMMIT will run on a dead session
	})
	if err == nil {
		t.Fatal("WithTx returned nil for a commit on a killed connection")
	}
	wantNoEvents(t, db.DB)
}

func TestAddRejectsIncompleteEvents(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	ctx := context.Background()
	cases := []outbox.Event{
		{AggregateID: 1, AggregateVersion: 1, Payload: 1},                                               // no type
		{AggregateVersion: 1, Type: events.OrderCreated, Payload: 1},                                    // no aggregate
		{AggregateID: 1, AggregateVersion: 1, Type: events.OrderCreated},                                // no payload
		{AggregateID: 1, AggregateVersion: 1, Type: events.OrderCreated, Payload: json.RawMessage("{")}, // bad JSON
		{EventID: "0123456789-0123456789-0123456789-0123456789", AggregateID: 1, AggregateVersion: 1, Type: events.OrderCreated, Payload: 1},
	}
	for i, e := range cases {
		err := sqldb.WithTx(ctx, db.DB, func(tx *sqlx.Tx) error {
			_, err := outbox.Add(ctx, tx, e)
			return err
		})
		if err == nil {
			t.Errorf("case %d: Add(%+v) succeeded, want an error", i, e)
		}
	}
	wantNoEvents(t, db.DB)
}

func TestDispatchPublishesPersistentMessagesAndMarksSent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	ids := addEvents(t, f.db.DB, events.OrderCreated, 3)
	d := f.dispatcher(outbox.Config{})

	res, err := d.DispatchOnce(ctx, f.conn.NewPublisher())
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed != 3 || res.Sent != 3 {
		t.Fatalf("result = %+v, want 3 claimed and 3 sent", res)
	}
	for _, id := range ids {
		r := readRows(t, f.db.DB)[id]
		if r.Status != "sent" || r.SentAt == nil || r.ClaimToken != nil || r.LeaseUntil != nil || r.Attempts != 1 {
			t.Errorf("row %s = %+v, want sent with sent_at, no token, no lease, 1 attempt", id, r)
		}
	}
	msgs := rabbittest.Drain(t, f.queue, 3, 5*time.Second)
	if len(msgs) != 3 {
		t.Fatalf("messages in queue = %d, want 3", len(msgs))
	}
	byID := map[string]amqp.Delivery{}
	for _, m := range msgs {
		byID[m.MessageId] = m
	}
	for i, id := range ids {
		m, ok := byID[id]
		if !ok {
			t.Fatalf("no message with message_id %s (the event id)", id)
		}
		want := fmt.Sprint(i + 1)
		if m.DeliveryMode != amqp.Persistent || m.Type != events.OrderCreated || m.ContentType != "application/json" ||
			m.Headers[events.HeaderAggregateID] != want || m.Headers[events.HeaderAggregateVersion] != int64(1) ||
			m.Headers[events.HeaderSchemaVersion] != int64(1) || m.Headers[events.HeaderCorrelationID] != want {
			t.Errorf("message %s: mode=%d type=%q ct=%q headers=%v", id, m.DeliveryMode, m.Type, m.ContentType, m.Headers)
		}
	}
}

func TestUnroutableMessageIsNotMarkedSent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	// Nobody is bound to payment.refunded in this namespace: the broker
	// confirms the message but returns it first.
	ids := addEvents(t, f.db.DB, events.PaymentRefunded, 1)
	routable := addEvents(t, f.db.DB, events.OrderCreated, 1)
	d := f.dispatcher(outbox.Config{Backoff: retry.Backoff{Base: time.Hour, Cap: time.Hour}})

	res, err := d.DispatchOnce(ctx, f.conn.NewPublisher())
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 1 || res.Retried != 1 {
		t.Fatalf("result = %+v, want 1 sent (routable) and 1 retried (returned)", res)
	}
	rows := readRows(t, f.db.DB)
	r := rows[ids[0]]
	if r.Status != "pending" || r.SentAt != nil || r.ClaimToken != nil || r.Attempts != 1 {
		t.Fatalf("returned event row = %+v, want pending, never sent, 1 attempt", r)
	}
	if wait := time.Until(r.NextAttemptAt); wait < 25*time.Minute || wait > time.Hour {
		t.Fatalf("next attempt in %v, want 30 min to an hour (the backoff, jitter inside its bound)", wait)
	}
	if rows[routable[0]].Status != "sent" {
		t.Fatalf("routable event = %+v, want sent", rows[routable[0]])
	}
}

// A queue that refuses new messages (max length 0, reject-publish) makes the
// broker nack: a real nack, not a simulated one.
func TestNackedPublishBacksOffThenFails(t *testing.T) {
	t.Parallel()
	ns := rabbittest.Namespace(t)
	topo := rabbittest.Topology(t, ns)
	conn := rabbittest.Conn(t, topo)
	full := ns.Queue("full")
	raw := rabbittest.Dial(t)
	defer raw.Close()
	ch, err := raw.Channel()
	if err != nil {
		t.Fatal(err)
	}
	args := amqp.Table{"x-max-length": int64(0), "x-overflow": "reject-publish"}
	if _, err := ch.QueueDeclare(full, false, true, false, false, args); err != nil {
		t.Fatal(err)
	}
	// Auto-delete needs a consumer that leaves; this queue never has one.
	t.Cleanup(func() {
		conn := rabbittest.Dial(t)
		defer conn.Close()
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(full, false, false, false)
		}
	})
	if err := ch.QueueBind(full, events.OrderCreated, ns.Exchange(), false, nil); err != nil {
		t.Fatal(err)
	}

	db := sqldbtest.New(t, "order")
	ids := addEvents(t, db.DB, events.OrderCreated, 1)
	d := outbox.New(db.DB, outbox.Config{
		Exchange: ns.Exchange(), NewPublisher: func() outbox.Publisher { return conn.NewPublisher() },
		MaxAttempts: 3, Backoff: retry.Backoff{Base: time.Millisecond, Cap: time.Millisecond}, Log: quiet,
	})
	ctx := context.Background()
	pub := conn.NewPublisher()
	var statuses []string
	for i := 0; i < 3; i++ {
		waitDue(t, db.DB)
		res, err := d.DispatchOnce(ctx, pub)
		if err != nil {
			t.Fatal(err)
		}
		if res.Claimed != 1 {
			t.Fatalf("round %d: claimed %d, want 1", i, res.Claimed)
		}
		r := readRows(t, db.DB)[ids[0]]
		statuses = append(statuses, fmt.Sprintf("%s/%d", r.Status, r.Attempts))
	}
	want := []string{"pending/1", "pending/2", "failed/3"}
	if fmt.Sprint(statuses) != fmt.Sprint(want) {
		t.Fatalf("status/attempts after each round = %v, want %v", statuses, want)
	}
	// A failed row is kept and never claimed again.
	res, err := d.DispatchOnce(ctx, pub)
	if err != nil || res.Claimed != 0 {
		t.Fatalf("after failing: claimed %d (err %v), want 0", res.Claimed, err)
	}
}

// 遵守总期限: retrying ends at the total deadline, measured from the first
// attempt in database time, whatever attempts remain. The event is then
// 'failed' (kept, never claimed again: TestNackedPublishBacksOffThenFails)
// and counted by the alert metric.
func TestRetryingEndsAtTheDeadline(t *testing.T) {
	t.Parallel()
	db, ids, d, reg := metered(t, 1, outbox.Config{MaxAttempts: 100, Deadline: time.Hour,
		Backoff: retry.Backoff{Base: time.Millisecond, Cap: time.Millisecond}})
	ctx := context.Background()
	pub := &fakePublisher{err: rabbit.ErrNacked}
	if res, err := d.DispatchOnce(ctx, pub); err != nil || res.Retried != 1 {
		t.Fatalf("first attempt: %+v, %v; want 1 retried", res, err)
	}
	// Two hours pass (in the database) since the first attempt.
	db.MustExec(`UPDATE outbox_events SET first_attempt_at = TIMESTAMPADD(HOUR, -2, first_attempt_at) WHERE event_id = ?`, ids[0])
	waitDue(t, db.DB)
	res, err := d.DispatchOnce(ctx, pub)
	if err != nil {
		t.Fatal(err)
	}
	if r := readRows(t, db.DB)[ids[0]]; res.Failed != 1 || r.Status != outbox.StatusFailed || r.Attempts != 2 || r.ClaimToken != nil {
		t.Fatalf("after the deadline: %+v, row %+v; want failed after 2 of 100 attempts, no claim", res, r)
	}
	if got := counter(t, reg, "outbox_marked_failed_total"); got != 1 {
		t.Fatalf("outbox_marked_failed_total = %v, want 1", got)
	}
}

// An expired lease means the attempt that claimed the row failed (the
// claim counted it): recovery backs the row off as after any failed
// attempt instead of handing it out again at once, and fails it when its
// attempts are used up or its deadline has passed.
func TestExpiredLeaseCountsAsAFailedAttempt(t *testing.T) {
	t.Parallel()
	db, ids, d, reg := metered(t, 3, outbox.Config{MaxAttempts: 3, Deadline: time.Hour,
		Backoff: retry.Backoff{Base: time.Hour, Cap: time.Hour}})
	fp := failpoint.NewRegistry()
	fp.Error("outbox.dispatch.after-claim", 1) // the dispatcher dies after its claim
	ctx := failpoint.WithRegistry(context.Background(), fp)
	if res, err := d.DispatchOnce(ctx, &fakePublisher{}); err == nil || res.Claimed != 3 {
		t.Fatalf("claim: %+v, %v; want 3 claimed, then the failpoint's error", res, err)
	}
	db.MustExec(`UPDATE outbox_events SET attempts = 3 WHERE event_id = ?`, ids[1])                                                // its last attempt
	db.MustExec(`UPDATE outbox_events SET first_attempt_at = TIMESTAMPADD(HOUR, -2, first_attempt_at) WHERE event_id = ?`, ids[2]) // past its deadline
	db.MustExec(`UPDATE outbox_events SET lease_until = TIMESTAMPADD(SECOND, -1, NOW(6))`)
	if n, err := d.RecoverExpired(context.Background()); err != nil || n != 3 {
		t.Fatalf("RecoverExpired = %d, %v; want 3", n, err)
	}
	rows := readRows(t, db.DB)
	if r := rows[ids[0]]; r.Status != outbox.StatusPending || r.Attempts != 1 || r.ClaimToken != nil ||
		time.Until(r.NextAttemptAt) < 25*time.Minute {
		t.Fatalf("recovered row %+v, want pending after 1 attempt, next attempt 30 min to an hour away (the backoff)", r)
	}
	for _, id := range ids[1:] {
		if r := rows[id]; r.Status != outbox.StatusFailed || r.ClaimToken != nil {
			t.Fatalf("row %s = %+v, want failed (attempts used up, or past the deadline)", id, r)
		}
	}
	if got := counter(t, reg, "outbox_marked_failed_total"); got != 2 {
		t.Fatalf("outbox_marked_failed_total = %v, want 2", got)
	}
}

// metered is a database with n events and a dispatcher (cfg, publishing to
// nowhere) whose metrics are on reg.
func metered(t *testing.T, n int, cfg outbox.Config) (db *sqldbtest.DB, ids []string, d *outbox.Dispatcher, reg *prometheus.Registry) {
	t.Helper()
	db = sqldbtest.New(t, "order")
	ids = addEvents(t, db.DB, events.OrderCreated, n)
	reg = prometheus.NewRegistry()
	cfg.Exchange, cfg.Log, cfg.Registerer = "x", quiet, reg
	return db, ids, outbox.New(db.DB, cfg), reg
}

// counter reads an unlabelled counter from reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return testutil.MustMetric(t, reg, name)
}

// waitDue waits until an outbox row is due (its backoff has passed).
func waitDue(t *testing.T, db *sqlx.DB) {
	t.Helper()
	testutil.WaitFor(t, 5*time.Second, "an outbox row to become due", func() bool {
		var due bool
		if err := db.Get(&due, "SELECT EXISTS(SELECT 1 FROM outbox_events WHERE status='pending' AND next_attempt_at <= NOW(6))"); err != nil {
			t.Fatal(err)
		}
		return due
	})
}

// fakePublisher answers every message with err after blocking until
// release is closed (if set). Only the dispatcher's bookkeeping is under
// test here; the broker's answers are covered by the tests above.
type fakePublisher struct {
	err     error
	entered chan struct{}
	release chan struct{}
}

func (p *fakePublisher) Publish(ctx context.Context, msgs []rabbit.Message, _ time.Duration) []error {
	if p.entered != nil {
		close(p.entered)
	}
	if p.release != nil {
		<-p.release
	}
	errs := make([]error, len(msgs))
	for i := range errs {
		errs[i] = p.err
	}
	return errs
}
func (p *fakePublisher) Close() {}

// stalledDispatch is a DispatchOnce stalled inside its publish, which
// confirms every message once released.
type stalledDispatch struct {
	pub  *fakePublisher
	res  outbox.Result
	done chan error
}

// stalledClaim is a fixture with one event that dispatcher a (a 300 ms
// lease) has claimed and is stalled publishing, and b (retries at once), the
// dispatcher that is to take the row over once a's lease has expired.
func stalledClaim(t *testing.T) (f *fixture, id string, a *stalledDispatch, b *outbox.Dispatcher) {
	t.Helper()
	f = newFixture(t)
	id = addEvents(t, f.db.DB, events.OrderCreated, 1)[0]
	a = stall(context.Background(), f.dispatcher(outbox.Config{Lease: 300 * time.Millisecond}))
	b = f.dispatcher(outbox.Config{Backoff: retry.Backoff{Base: time.Millisecond, Cap: time.Millisecond}})
	return f, id, a, b
}

// stall starts d.DispatchOnce and returns once it is publishing.
func stall(ctx context.Context, d *outbox.Dispatcher) *stalledDispatch {
	s := &stalledDispatch{pub: &fakePublisher{entered: make(chan struct{}), release: make(chan struct{})}, done: make(chan error)}
	go func() {
		var err error
		s.res, err = d.DispatchOnce(ctx, s.pub)
		s.done <- err
	}()
	<-s.pub.entered
	return s
}

// release lets the publish return, every message confirmed, and returns
// what the dispatch did.
func (s *stalledDispatch) release(t *testing.T) outbox.Result {
	t.Helper()
	close(s.pub.release)
	if err := <-s.done; err != nil {
		t.Fatal(err)
	}
	return s.res
}

// expireAndRecover expires the lease of event id and runs d's recovery
// until it hands the row back. A stalled claimant's renewer still runs
// (it is inside its publish) and may renew between the two on a busy
// machine: a few tries at most.
func expireAndRecover(t *testing.T, db *sqldbtest.DB, d *outbox.Dispatcher, id string) {
	t.Helper()
	var n int
	for try := 0; n == 0 && try < 20; try++ {
		db.MustExec("UPDATE outbox_events SET lease_until = TIMESTAMPADD(SECOND, -1, NOW(6)) WHERE event_id = ?", id)
		var err error
		if n, err = d.RecoverExpired(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n != 1 {
		t.Fatalf("RecoverExpired = %d; want 1 row", n)
	}
}

// timeoutRecorder remembers the confirm timeout each publish was given.
type timeoutRecorder struct{ got []time.Duration }

func (p *timeoutRecorder) Publish(_ context.Context, msgs []rabbit.Message, timeout time.Duration) []error {
	p.got = append(p.got, timeout)
	return make([]error, len(msgs))
}
func (p *timeoutRecorder) Close() {}

// The wait for confirms is derived from the lease, at most a third of it,
// so that a batch whose renewals fail still has the rest of its lease to be
// marked before recovery may hand it to another dispatcher. A longer one is
// refused.
func TestConfirmTimeoutIsAThirdOfTheLeaseAtMost(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	for _, tt := range []struct {
		lease, confirm, want time.Duration
	}{
		{3 * time.Second, 0, time.Second},                                 // the tests' lease
		{30 * time.Second, 0, 5 * time.Second},                            // the default lease: capped at 5 s
		{3 * time.Second, 500 * time.Millisecond, 500 * time.Millisecond}, // set, and within the rule
	} {
		addEvents(t, db.DB, events.OrderCreated, 1)
		pub := &timeoutRecorder{}
		d := outbox.New(db.DB, outbox.Config{Exchange: "x", Log: quiet, Lease: tt.lease, ConfirmTimeout: tt.confirm})
		if _, err := d.DispatchOnce(context.Background(), pub); err != nil {
			t.Fatal(err)
		}
		if len(pub.got) != 1 || pub.got[0] != tt.want {
			t.Errorf("lease %s, confirm timeout %s: publish waited %v for confirms, want %s", tt.lease, tt.confirm, pub.got, tt.want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("a confirm timeout of 2s with a 3s lease was accepted, want a panic")
		}
	}()
	outbox.New(db.DB, outbox.Config{Exchange: "x", Log: quiet, Lease: 3 * time.Second, ConfirmTimeout: 2 * time.Second})
}

func TestUnconfirmedPublishIsRetried(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	ids := addEvents(t, db.DB, events.OrderCreated, 2)
	d := outbox.New(db.DB, outbox.Config{Exchange: "x", Log: quiet, Backoff: retry.Backoff{Base: time.Minute, Cap: time.Minute}})
	res, err := d.DispatchOnce(context.Background(), &fakePublisher{err: rabbit.ErrConfirmTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if res.Retried != 2 || res.Sent != 0 {
		t.Fatalf("result = %+v, want 2 retried, 0 sent", res)
	}
	for _, id := range ids {
		// Backoff bound one minute, equal jitter: 30 s to a minute away.
		if r := readRows(t, db.DB)[id]; r.Status != "pending" || r.SentAt != nil ||
			time.Until(r.NextAttemptAt) < 25*time.Second || time.Until(r.NextAttemptAt) > time.Minute {
			t.Fatalf("row = %+v, want pending with a next attempt 30 s to a minute away", r)
		}
	}
}

// The chapter's claim race: many dispatchers (separate connection pools, as
// separate processes would have) released together on one backlog. Every
// event must be claimed and published exactly once.
func TestConcurrentDispatchersNeverOverlap(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n = 600
	addEvents(t, f.db.DB, events.OrderCreated, n)

	const dispatchers = 6
	results := make([][]outbox.Result, dispatchers)
	ds := make([]*outbox.Dispatcher, dispatchers)
	for i := 0; i < dispatchers; i++ {
		pool, err := sqldb.Open(context.Background(), sqldb.Config{DSN: f.db.DSN, MaxOpenConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		ds[i] = outbox.New(pool, outbox.Config{Exchange: f.ns.Exchange(), BatchSize: 25, Log: quiet,
			NewPublisher: func() outbox.Publisher { return f.conn.NewPublisher() }})
	}
	testutil.Together(dispatchers, func(i int) {
		pub := f.conn.NewPublisher() // opens its channel on first use
		defer pub.Close()
		for {
			res, err := ds[i].DispatchOnce(context.Background(), pub)
			if err != nil {
				t.Error(err)
				return
			}
			if res.Claimed == 0 {
				return
			}
			results[i] = append(results[i], res)
		}
	})

	claimed, sent := 0, 0
	for _, rs := range results {
		for _, r := range rs {
			claimed += r.Claimed
			sent += r.Sent
		}
	}
	if claimed != n || sent != n {
		t.Fatalf("claimed %d, sent %d, want %d each (an overlap would claim more)", claimed, sent, n)
	}
	msgs := rabbittest.Drain(t, f.queue, n, 10*time.Second)
	seen := map[string]int{}
	for _, m := range msgs {
		seen[m.MessageId]++
	}
	if len(msgs) != n || len(seen) != n {
		t.Fatalf("queue holds %d messages with %d distinct ids, want %d and %d", len(msgs), len(seen), n, n)
	}
	for id, r := range readRows(t, f.db.DB) {
		if r.Status != "sent" || r.Attempts != 1 {
			t.Fatalf("row %s = %+v, want sent after exactly 1 attempt", id, r)
		}
	}
}

// Lease expiry: dispatcher A claims and stalls; the lease runs out (database
// time); recovery re-queues the row; B claims, publishes and marks it. A
// then tries to mark with its old token and changes nothing.
func TestExpiredLeaseIsRecoveredAndOldClaimantCannotMark(t *testing.T) {
	t.Parallel()
	f, id, a, b := stalledClaim(t)
	ctx := context.Background()
	var tokenA string
	if err := f.db.Get(&tokenA, "SELECT claim_token FROM outbox_events WHERE event_id = ?", id); err != nil {
		t.Fatal(err)
	}
	// A's publish is slow but alive: it renews its lease, so recovery must
	// leave the row alone for now.
	testutil.WaitFor(t, 10*time.Second, "A to renew its lease", func() bool {
		var renewed bool
		_ = f.db.Get(&renewed, "SELECT lease_until > TIMESTAMPADD(MICROSECOND, 250000, NOW(6)) FROM outbox_events WHERE event_id = ?", id)
		return renewed
	})
	// Now A stalls outside the publish (the failpoint case): simulate by
	// expiring its lease in the table, as time would.
	expireAndRecover(t, f.db, b, id)
	if r := readRows(t, f.db.DB)[id]; r.Status != "pending" || r.ClaimToken != nil || r.LeaseUntil != nil {
		t.Fatalf("after recovery: %+v, want pending without token or lease", r)
	}
	waitDue(t, f.db.DB) // the expired claim was a failed attempt: its backoff first
	resB, err := b.DispatchOnce(ctx, f.conn.NewPublisher())
	if err != nil || resB.Sent != 1 {
		t.Fatalf("B: %+v, %v; want 1 sent", resB, err)
	}
	rowB := readRows(t, f.db.DB)[id]

	aRes := a.release(t) // A wakes up believing its publish was confirmed
	if aRes.Sent != 0 || aRes.Lost != 1 {
		t.Fatalf("A: %+v, want 0 sent and 1 lost (its mark-sent must affect 0 rows)", aRes)
	}
	rowAfter := readRows(t, f.db.DB)[id]
	if rowAfter.Status != "sent" || rowAfter.Attempts != 2 || !rowAfter.SentAt.Equal(*rowB.SentAt) {
		t.Fatalf("row after A resumed = %+v, want B's state untouched (sent at %v, 2 attempts)", rowAfter, rowB.SentAt)
	}
	if tokenA == "" {
		t.Fatal("A had no claim token")
	}
}

// Run with wake-up: an event committed while the dispatcher idles is
// published without waiting for the (here, one hour) poll interval.
func TestRunPublishesOnWake(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	d := f.dispatcher(outbox.Config{PollInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()

	ids := addEvents(t, f.db.DB, events.OrderCreated, 1)
	d.Wake()
	msgs := rabbittest.Drain(t, f.queue, 1, 10*time.Second)
	if len(msgs) != 1 || msgs[0].MessageId != ids[0] {
		t.Fatalf("got %d messages, want the event %s", len(msgs), ids[0])
	}
	testutil.WaitFor(t, 10*time.Second, "the event marked sent", func() bool { return readRows(t, f.db.DB)[ids[0]].Status == "sent" })
}

// The chapter's "broker received it, the confirm was lost": the outcome is
// unknown, so the row is not marked sent; the next attempt re-sends it with
// the same event_id, and the queue holds two copies of one event, which is
// what consumer inboxes are for.
func TestLostConfirmIsResentWithTheSameEventID(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ids := addEvents(t, f.db.DB, events.OrderCreated, 1)
	fp := failpoint.NewRegistry()
	fp.Error("outbox.dispatch.after-publish-before-confirm", 1)
	ctx := failpoint.WithRegistry(context.Background(), fp)
	d := f.dispatcher(outbox.Config{Backoff: retry.Backoff{Base: time.Millisecond, Cap: time.Millisecond}})
	pub := outbox.RabbitPublishers(f.conn)()
	defer pub.Close()

	res, err := d.DispatchOnce(ctx, pub)
	if err != nil || res.Retried != 1 || res.Sent != 0 {
		t.Fatalf("first attempt: %+v, %v; want 1 retried, 0 sent", res, err)
	}
	if r := readRows(t, f.db.DB)[ids[0]]; r.Status != "pending" || r.Attempts != 1 {
		t.Fatalf("after the lost confirm: %+v, want pending after 1 attempt", r)
	}
	waitDue(t, f.db.DB)
	if res, err := d.DispatchOnce(ctx, pub); err != nil || res.Sent != 1 {
		t.Fatalf("second attempt: %+v, %v; want 1 sent", res, err)
	}
	msgs := rabbittest.Drain(t, f.queue, 2, 5*time.Second)
	if len(msgs) != 2 || msgs[0].MessageId != ids[0] || msgs[1].MessageId != ids[0] {
		t.Fatalf("queue holds %d messages, want 2 copies of event %s", len(msgs), ids[0])
	}
	if fp.Hits("outbox.dispatch.after-publish-before-confirm") != 2 {
		t.Fatalf("failpoint hits = %d, want 2 (both attempts passed the window)", fp.Hits("outbox.dispatch.after-publish-before-confirm"))
	}
}

// A commit wakes one idle worker, not every worker: with four idle workers,
// each of ten events committed one at a time is sent by exactly one claim
// transaction and no worker makes an empty claim. (Waking all of them cost
// three empty claim transactions per commit.)
func TestWakeClaimsOnceWithManyIdleWorkers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	reg := prometheus.NewRegistry()
	d := f.dispatcher(outbox.Config{Workers: 4, PollInterval: time.Hour, Registerer: reg})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// Each worker makes one claim when it starts (the backlog check), then idles.
	testutil.WaitFor(t, 10*time.Second, "the four start-up claims", func() bool { return claims(t, reg, "empty") == 4 })
	for i := range 10 {
		ids := addEvents(t, f.db.DB, events.OrderCreated, 1)
		d.Wake()
		testutil.WaitFor(t, 10*time.Second, "the event marked sent", func() bool { return readRows(t, f.db.DB)[ids[0]].Status == "sent" })
		if got := claims(t, reg, "rows"); got != float64(i+1) {
			t.Fatalf("after event %d: %v claims with rows, want %d", i+1, got, i+1)
		}
	}
	if got := claims(t, reg, "empty"); got != 4 {
		t.Fatalf("empty claims = %v, want the 4 start-up claims only", got)
	}
	if msgs := rabbittest.Drain(t, f.queue, 10, 10*time.Second); len(msgs) != 10 {
		t.Fatalf("queue holds %d messages, want 10", len(msgs))
	}
}

// claims reads outbox_claims_total{result} from reg.
func claims(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	return testutil.MustMetric(t, reg, "outbox_claims_total", "result", result)
}

// The read API of the operator's view (List, OfAggregate, Summarize) and
// Requeue: a failed row goes back to pending with fresh attempts under the
// same event_id, a row in another status is left alone.
func TestRowsAndRequeue(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	ctx := context.Background()
	ids := addEvents(t, db.DB, events.OrderCreated, 3) // aggregates 1, 2, 3
	db.MustExec(`UPDATE outbox_events SET status = 'failed', attempts = 10, total_attempts = 12, requeues = 1,
  first_attempt_at = created_at WHERE event_id = ?`, ids[0]) // failed twice before its last round
	db.MustExec(`UPDATE outbox_events SET status = 'sent', sent_at = NOW(6) WHERE event_id = ?`, ids[1])

	sum, err := outbox.Summarize(ctx, db.DB)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"pending": 1, "sending": 0, "sent": 1, "failed": 1}
	for s, n := range want {
		if sum.ByStatus[s] != n {
			t.Errorf("summary %s = %d, want %d (%v)", s, sum.ByStatus[s], n, sum.ByStatus)
		}
	}
	if sum.OldestPendingAge < 0 {
		t.Errorf("oldest pending age %g, want >= 0", sum.OldestPendingAge)
	}

	failed, err := outbox.List(ctx, db.DB, outbox.Filter{Status: outbox.StatusFailed, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != 1 || failed[0].EventID != ids[0] || failed[0].AggregateID != 1 || len(failed[0].Payload) == 0 {
		t.Fatalf("failed rows = %+v, want %s of aggregate 1 with its payload", failed, ids[0])
	}
	if _, err := outbox.List(ctx, db.DB, outbox.Filter{}); err == nil {
		t.Fatal("List without a limit: no error")
	}
	own, err := outbox.OfAggregate(ctx, db.DB, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(own) != 1 || own[0].EventID != ids[1] || own[0].Status != outbox.StatusSent || own[0].SentAt == nil {
		t.Fatalf("rows of aggregate 2 = %+v, want %s sent", own, ids[1])
	}

	// Only the rows in from move.
	for _, id := range ids[1:] {
		if done, err := outbox.Requeue(ctx, db.DB, id, outbox.StatusFailed); err != nil || done {
			t.Fatalf("requeue of non-failed %s = %v, %v; want false", id, done, err)
		}
	}
	if done, err := outbox.Requeue(ctx, db.DB, ids[0], outbox.StatusFailed); err != nil || !done {
		t.Fatalf("requeue of failed %s = %v, %v; want true", ids[0], done, err)
	}
	got := readRows(t, db.DB)
	if r := got[ids[0]]; r.Status != outbox.StatusPending || r.Attempts != 0 || r.ClaimToken != nil {
		t.Fatalf("requeued row = %+v, want pending with 0 attempts and no claim", r)
	}
	// The history stays: every attempt, and one more round started.
	if rows, err := outbox.OfAggregate(ctx, db.DB, 1); err != nil || len(rows) != 1 || rows[0].TotalAttempts != 12 ||
		rows[0].Requeues != 2 || rows[0].FirstAttemptAt != nil {
		t.Fatalf("requeued row = %+v (%v), want 12 attempts in all, 2 requeues, its deadline not started", rows, err)
	}
	if r := got[ids[1]]; r.Status != outbox.StatusSent {
		t.Fatalf("sent row became %s, want it left alone", r.Status)
	}
}
