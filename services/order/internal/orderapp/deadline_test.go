package orderapp_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderapp"
	"github.com/relmsg/ordersaga/services/order/internal/peerclient"
)

var testDeadlines = order.Deadlines{Participant: 2 * time.Minute, Payment: 10 * time.Minute,
	PaymentMargin: time.Minute, OutcomeWait: 2 * time.Minute, Recheck: 15 * time.Second}

// deadlineFixture is an order app with the default deadlines, its own
// metrics registry and a fake payment service to ask at the payment
// deadline (no record of any order unless a test sets an outcome). newApp
// makes another app on the same database: a restarted process, or a
// second instance.
type deadlineFixture struct {
	*fixture
	reg     *prometheus.Registry
	payment *peer
}

func newDeadlineFixture(t *testing.T) *deadlineFixture {
	t.Helper()
	db := sqldbtest.New(t, "order")
	f := &deadlineFixture{fixture: &fixture{db: db.DB}, payment: newPeer(t, "/payments/", adminToken)}
	f.app, f.reg = f.newApp()
	f.cons = newConsumer(db.DB, f.app, nil)
	return f
}

func (f *deadlineFixture) newApp() (*orderapp.App, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	peers := peerclient.New("http://127.0.0.1:1", f.payment.srv.URL, adminToken, 2*time.Second)
	return orderapp.New(f.db, func() {}, quiet, orderapp.Config{Deadlines: testDeadlines, Peers: peers, Registerer: reg}), reg
}

// overdue creates an order (with this idempotency key), brings it to
// state, a waiting state (awaiting_payment: its inventory.reserved
// delivered), and moves its deadline into the past: what a clock would do.
func (f *deadlineFixture) overdue(t *testing.T, key string, state order.Status) order.Order {
	t.Helper()
	o := f.create(t, key)
	switch state {
	case order.PendingInventory:
	case order.AwaitingPayment:
		f.deliver(t, reserved(t, o))
	default:
		t.Fatalf("overdue: %s is not a waiting state", state)
	}
	if _, err := f.db.Exec(`UPDATE orders SET deadline_at = TIMESTAMPADD(SECOND, -1, NOW(6)) WHERE id = ? AND deadline_at IS NOT NULL`, o.ID); err != nil {
		t.Fatal(err)
	}
	return o
}

// secondsLeft is how far the order's deadline is from now, database time.
func (f *fixture) secondsLeft(t *testing.T, id uint64) *float64 {
	t.Helper()
	return getOne[*float64](t, f.db, `SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), deadline_at) / 1e6 FROM orders WHERE id = ?`, id)
}

// Each state change sets the deadline of the new state in the same
// statement: pending_inventory gets the participant deadline,
// awaiting_payment the payment deadline, and the end of the saga clears it.
func TestDeadlineFollowsTheState(t *testing.T) {
	t.Parallel()
	f := newDeadlineFixture(t)
	o := f.create(t, "k")
	within := func(what string, left *float64, want time.Duration) {
		t.Helper()
		if left == nil || *left > want.Seconds() || *left < want.Seconds()-30 {
			t.Fatalf("%s: deadline in %v s, want about %v", what, left, want)
		}
	}
	within("pending_inventory", f.secondsLeft(t, o.ID), testDeadlines.Participant)
	if got := f.status(t, o.ID); got.DeadlineAt.IsZero() {
		t.Fatal("the domain order has no deadline")
	}
	f.deliver(t, reserved(t, o))
	within("awaiting_payment", f.secondsLeft(t, o.ID), testDeadlines.For(order.AwaitingPayment))
	if want := testDeadlines.Payment + testDeadlines.PaymentMargin; testDeadlines.For(order.AwaitingPayment) != want {
		t.Fatalf("awaiting_payment deadline %v, want the payment's %v plus the margin", testDeadlines.For(order.AwaitingPayment), want)
	}
	f.deliver(t, envelope(t, events.PaymentSucceeded, o.ID, events.PaymentSucceededV1{OrderID: o.ID}))
	if left := f.secondsLeft(t, o.ID); left != nil {
		t.Fatalf("confirmed order still has a deadline in %v s", *left)
	}
	if round, err := f.app.ExpireDeadlines(context.Background(), 10); err != nil || round.Found != 0 {
		t.Fatalf("sweep over a confirmed order: %+v %v", round, err)
	}
}

// Deadline expiry in either waiting state cancels through the customer
// cancel's decision: cancelled with the reason, OrderCancelled in the
// outbox (inventory releases, payment refunds if it charged), a history
// row by the deadline sweep, the deadline cleared and counted.
func TestDeadlineExpiryCancels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		state  order.Status
		reason string
	}{
		{"inventory never answered", order.PendingInventory, "inventory did not answer in time"},
		{"payment never answered", order.AwaitingPayment, "payment deadline passed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newDeadlineFixture(t)
			ctx := context.Background()
			o := f.overdue(t, "late", tt.state)
			other := f.create(t, "on-time") // not due: untouched

			round, err := f.app.ExpireDeadlines(ctx, 10)
			if err != nil || round.Found != 1 || round.Cancelled != 1 {
				t.Fatalf("round = %+v err %v, want one found, one cancelled", round, err)
			}
			got := f.status(t, o.ID)
			if got.Status != order.Cancelled || got.StatusReason != tt.reason || !got.DeadlineAt.IsZero() {
				t.Fatalf("order = %s %q deadline %v, want cancelled %q, no deadline", got.Status, got.StatusReason, got.DeadlineAt, tt.reason)
			}
			cancels := outboxOf(f.fixture, t, o.ID, events.OrderCancelled)
			if len(cancels) != 1 {
				t.Fatalf("order.cancelled rows = %+v, want 1", cancels)
			}
			p, err := events.Decode[events.OrderCancelledV1](cancels[0].Payload)
			if err != nil || p.OrderID != o.ID || p.Reason != tt.reason {
				t.Fatalf("payload = %+v %v", p, err)
			}
			h := f.history(t, o.ID)
			last := h[len(h)-1]
			if last.Actor != orderapp.ActorDeadline || last.From != string(tt.state) || last.To != "cancelled" ||
				last.Trigger != string(order.CancelRequested) || last.EmittedEventID == nil || *last.EmittedEventID != cancels[0].EventID {
				t.Fatalf("history = %+v", last)
			}
			if s := f.status(t, other.ID).Status; s != order.PendingInventory {
				t.Fatalf("the order not yet due moved to %s", s)
			}
			expired, _ := testutil.Metric(t, f.reg, "order_deadlines_expired_total", "status", string(tt.state))
			if expired != 1 {
				t.Fatalf("order_deadlines_expired_total{status=%s} = %v, want 1", tt.state, expired)
			}
			// Nothing left to do.
			if round, err := f.app.ExpireDeadlines(ctx, 10); err != nil || round.Found != 0 {
				t.Fatalf("second round = %+v %v", round, err)
			}
		})
	}
}

// The payment succeeds after the deadline cancelled the order: the money
// must come back (refund pending; payment refunds on OrderCancelled).
func TestPaymentAfterTheDeadlineCancelIsRefunded(t *testing.T) {
	t.Parallel()
	f := newDeadlineFixture(t)
	o := f.overdue(t, "k", order.AwaitingPayment)
	if _, err := f.app.ExpireDeadlines(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	f.deliver(t, envelope(t, events.PaymentSucceeded, o.ID, events.PaymentSucceededV1{OrderID: o.ID}))
	if got := f.status(t, o.ID); got.Status != order.Cancelled || got.RefundStatus != order.RefundPending {
		t.Fatalf("order = %s refund %s, want cancelled with the refund pending", got.Status, got.RefundStatus)
	}
}

// Deadlines live in the table, not in a timer of the process that set
// them: a new process (another App on the same database, nothing shared in
// memory) cancels what the first one left.
func TestDeadlineSweepResumesAfterARestart(t *testing.T) {
	t.Parallel()
	f := newDeadlineFixture(t)
	ctx := context.Background()
	o := f.overdue(t, "before-restart", order.PendingInventory)

	restarted, _ := f.newApp()
	round, err := restarted.ExpireDeadlines(ctx, 10)
	if err != nil || round.Cancelled != 1 {
		t.Fatalf("round after restart = %+v %v", round, err)
	}
	if got := f.status(t, o.ID); got.Status != order.Cancelled || got.StatusReason != "inventory did not answer in time" {
		t.Fatalf("order = %s %q", got.Status, got.StatusReason)
	}
}

// Two sweepers (two instances) race over the same due orders, released
// together after both have read their candidates: each order is cancelled
// once, with one OrderCancelled and one history row.
func TestTwoSweepersCancelEachOrderOnce(t *testing.T) {
	t.Parallel()
	f := newDeadlineFixture(t)
	ctx := context.Background()
	const n = 5
	var ids []uint64
	for i := range n {
		o := f.overdue(t, "race-"+string(rune('a'+i)), order.PendingInventory)
		ids = append(ids, o.ID)
	}
	other, _ := f.newApp()
	fp := failpoint.NewRegistry()
	gate := fp.Pause(orderapp.FailpointDeadlineBeforeCancel, 0)
	fctx := failpoint.WithRegistry(ctx, fp)

	var wg sync.WaitGroup
	rounds := make([]orderapp.DeadlineRound, 2)
	errs := make([]error, 2)
	for i, app := range []*orderapp.App{f.app, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rounds[i], errs[i] = app.ExpireDeadlines(fctx, n)
		}()
	}
	// Both sweepers have read all n candidates and wait at the lock.
	testutil.WaitFor(t, 10*time.Second, "the two sweepers to reach the failpoint", func() bool {
		return paused(fp, orderapp.FailpointDeadlineBeforeCancel) >= 2
	})
	gate.Release()
	wg.Wait()

	for i := range errs {
		if errs[i] != nil {
			t.Fatalf("sweeper %d: %v", i, errs[i])
		}
	}
	if rounds[0].Found != n || rounds[1].Found != n || rounds[0].Cancelled+rounds[1].Cancelled != n {
		t.Fatalf("rounds = %+v, want both to find %d and %d cancels in all", rounds, n, n)
	}
	for _, id := range ids {
		if s := f.status(t, id).Status; s != order.Cancelled {
			t.Fatalf("order %d: %s", id, s)
		}
		if c := len(outboxOf(f.fixture, t, id, events.OrderCancelled)); c != 1 {
			t.Fatalf("order %d: %d order.cancelled rows, want 1", id, c)
		}
		moves := 0
		for _, h := range f.history(t, id) {
			if h.Actor == orderapp.ActorDeadline {
				moves++
			}
		}
		if moves != 1 {
			t.Fatalf("order %d: %d deadline history rows, want 1", id, moves)
		}
	}
}

func paused(fp *failpoint.Registry, name string) int {
	for _, s := range fp.Armed() {
		if s.Name == name {
			return s.Paused
		}
	}
	return 0
}

// A sweeper does not wait behind a row someone else holds: the order is
// skipped this round (SKIP LOCKED) and cancelled by the next.
func TestDeadlineSweepSkipsALockedOrder(t *testing.T) {
	t.Parallel()
	f := newDeadlineFixture(t)
	ctx := context.Background()
	o := f.overdue(t, "held", order.PendingInventory)

	tx, err := f.db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`SELECT id FROM orders WHERE id = ? FOR UPDATE`, o.ID); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	round, err := f.app.ExpireDeadlines(ctx, 10)
	if err != nil || round.Found != 1 || round.Cancelled != 0 {
		t.Fatalf("round while locked = %+v %v, want found 1, cancelled 0", round, err)
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Fatalf("the sweeper waited %v behind the lock", waited)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if round, err := f.app.ExpireDeadlines(ctx, 10); err != nil || round.Cancelled != 1 {
		t.Fatalf("round after the lock = %+v %v", round, err)
	}
}

// The sweep's database session is killed in the middle of its transaction
// (here while its history insert waits behind a table lock the test holds):
// the transaction failed before COMMIT, so it runs again on a new
// connection, and the order is cancelled once, in the same round.
func TestDeadlineSweepSurvivesAKilledSession(t *testing.T) {
	t.Parallel()
	f := newDeadlineFixture(t)
	ctx := context.Background()
	o := f.overdue(t, "killed", order.PendingInventory)

	conn, err := f.db.Connx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "LOCK TABLES order_history WRITE"); err != nil {
		t.Fatal(err)
	}
	done := testutil.Go(func() (orderapp.DeadlineRound, error) { return f.app.ExpireDeadlines(ctx, 10) })
	// The sweep holds the order's row lock and waits for the table lock
	// (order_history's, or that of orders, which the lock covers through
	// the foreign key).
	var victim int64
	testutil.WaitFor(t, 10*time.Second, "the sweep to open its transaction", func() bool {
		_ = f.db.Get(&victim, `SELECT COALESCE(MAX(ID), 0) FROM information_schema.PROCESSLIST
WHERE DB = DATABASE() AND ID <> ? AND STATE LIKE '%metadata lock%'`, connID(t, conn))
		return victim != 0
	})
	if _, err := f.db.Exec("KILL CONNECTION ?", victim); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.Err != nil || r.Value.Cancelled != 1 {
		t.Fatalf("round with a killed session = %+v %v, want the order cancelled", r.Value, r.Err)
	}
	if got := f.status(t, o.ID); got.Status != order.Cancelled {
		t.Fatalf("order %s, want cancelled", got.Status)
	}
	deadlineMoves := 0
	for _, h := range f.history(t, o.ID) {
		if h.Actor == orderapp.ActorDeadline {
			deadlineMoves++
		}
	}
	if n := len(outboxOf(f.fixture, t, o.ID, events.OrderCancelled)); n != 1 || deadlineMoves != 1 {
		t.Fatalf("%d order.cancelled rows and %d deadline history rows, want 1 and 1", n, deadlineMoves)
	}
}

func connID(t *testing.T, conn *sqlx.Conn) int64 {
	t.Helper()
	var id int64
	if err := conn.GetContext(context.Background(), &id, "SELECT CONNECTION_ID()"); err != nil {
		t.Fatal(err)
	}
	return id
}

// age pretends the order entered its state ago in the past (updated_at),
// with its deadline passed: how long it has waited bounds the wait for an
// unknown payment outcome.
func (f *deadlineFixture) age(t *testing.T, id uint64, ago time.Duration) {
	t.Helper()
	if _, err := f.db.Exec(`UPDATE orders SET updated_at = TIMESTAMPADD(MICROSECOND, -?, NOW(6)),
  deadline_at = TIMESTAMPADD(SECOND, -1, NOW(6)) WHERE id = ?`, ago.Microseconds(), id); err != nil {
		t.Fatal(err)
	}
}

func (f *deadlineFixture) checks(t *testing.T, outcome string, action order.DeadlineAction) float64 {
	t.Helper()
	return (&recon{reg: f.reg}).counter(t, "order_payment_deadline_checks_total", "outcome", outcome, "decision", string(action))
}

// At the payment deadline the sweep asks payment what became of the charge
// before it cancels (扣款超时结果未知时，先查询，而不是直接取消), and decides from the
// answer: a paid order is never cancelled; nothing charged or declined is
// cancelled; an unknown outcome, or a payment service that cannot be
// asked, is waited for (the deadline moves by Recheck) until the wait is
// over, and only then cancelled, with a reason that says so.
func TestPaymentDeadlineAsksPaymentBeforeCancelling(t *testing.T) {
	t.Parallel()
	overdue := testDeadlines.GiveUp() + time.Second
	tests := []struct {
		name    string
		outcome string // "" : payment has no record (404); "broken": 500
		waited  time.Duration
		want    order.DeadlineAction
		reason  string
		label   string
	}{
		{"paid", order.OutcomeSucceeded, 0, order.DeadlineWait, "", order.OutcomeSucceeded},
		{"paid, long after", order.OutcomeSucceeded, overdue, order.DeadlineWait, "", order.OutcomeSucceeded},
		{"declined", order.OutcomeDeclined, 0, order.DeadlineCancel, "payment deadline passed", order.OutcomeDeclined},
		{"never charged", order.OutcomeNotCharged, 0, order.DeadlineCancel, "payment deadline passed", order.OutcomeNotCharged},
		{"no payment", "", 0, order.DeadlineCancel, "payment deadline passed", order.OutcomeNoPayment},
		{"unknown", order.OutcomeUnknown, 0, order.DeadlineWait, "", order.OutcomeUnknown},
		{"unknown, the wait over", order.OutcomeUnknown, overdue, order.DeadlineCancel,
			"payment deadline passed with the charge's outcome unknown (a late charge is refunded)", order.OutcomeUnknown},
		{"payment down", "broken", 0, order.DeadlineWait, "", order.OutcomeNotAsked},
		{"payment down, the wait over", "broken", overdue, order.DeadlineCancel,
			"payment deadline passed with the charge's outcome unknown (a late charge is refunded)", order.OutcomeNotAsked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newDeadlineFixture(t)
			ctx := context.Background()
			o := f.create(t, "k")
			f.deliver(t, reserved(t, o))
			switch tt.outcome {
			case "":
			case "broken":
				f.payment.setStatus(o.ID, 500)
			default:
				f.payment.setOutcome(o.ID, tt.outcome)
			}
			f.age(t, o.ID, tt.waited)

			round, err := f.app.ExpireDeadlines(ctx, 10)
			if err != nil || round.Found != 1 {
				t.Fatalf("round = %+v %v", round, err)
			}
			if n := f.payment.hit("GET /payments/" + itoa(o.ID) + "/outcome"); n != 1 {
				t.Fatalf("payment asked %d times, want once before deciding", n)
			}
			got := f.status(t, o.ID)
			switch tt.want {
			case order.DeadlineWait:
				left := f.secondsLeft(t, o.ID)
				if round.Waiting != 1 || got.Status != order.AwaitingPayment || left == nil ||
					*left > testDeadlines.Recheck.Seconds() || *left < testDeadlines.Recheck.Seconds()-10 {
					t.Fatalf("round %+v, order %s, deadline in %v s: want it waiting, asked again in %v", round, got.Status, left, testDeadlines.Recheck)
				}
				if n := len(outboxOf(f.fixture, t, o.ID, events.OrderCancelled)); n != 0 {
					t.Fatalf("%d order.cancelled events for an order left waiting", n)
				}
			case order.DeadlineCancel:
				if round.Cancelled != 1 || got.Status != order.Cancelled || got.StatusReason != tt.reason {
					t.Fatalf("round %+v, order %s %q: want cancelled %q", round, got.Status, got.StatusReason, tt.reason)
				}
			}
			if n := f.checks(t, tt.label, tt.want); n != 1 {
				t.Fatalf("order_payment_deadline_checks_total{%s,%s} = %v, want 1", tt.label, tt.want, n)
			}
		})
	}
}

// A paid order whose payment.succeeded is late: the sweep waits, the event
// arrives, the order is confirmed, and the next round has nothing to do.
func TestPaymentDeadlineWaitsForALatePaymentSucceeded(t *testing.T) {
	t.Parallel()
	f := newDeadlineFixture(t)
	ctx := context.Background()
	o := f.overdue(t, "k", order.AwaitingPayment)
	f.payment.setOutcome(o.ID, order.OutcomeSucceeded)
	if round, err := f.app.ExpireDeadlines(ctx, 10); err != nil || round.Waiting != 1 {
		t.Fatalf("round = %+v %v, want the order left waiting", round, err)
	}
	f.deliver(t, envelope(t, events.PaymentSucceeded, o.ID, events.PaymentSucceededV1{OrderID: o.ID}))
	if got := f.status(t, o.ID); got.Status != order.Confirmed || !got.DeadlineAt.IsZero() {
		t.Fatalf("order %s, deadline %v: want confirmed, no deadline", got.Status, got.DeadlineAt)
	}
	if round, err := f.app.ExpireDeadlines(ctx, 10); err != nil || round.Found != 0 {
		t.Fatalf("next round = %+v %v, want nothing past its deadline", round, err)
	}
}
