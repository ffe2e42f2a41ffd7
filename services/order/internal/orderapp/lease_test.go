package orderapp_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/instance"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderapp"
	"github.com/relmsg/ordersaga/services/order/internal/peerclient"
)

// Two instances of the order service (two Apps on one schema) run the
// reconciler at once. The first takes the database lease and is held
// before its repair; the second's scheduled run skips, and an operator's
// run on it waits for the lease, then finds the order repaired. One audit
// row, written by the first instance; one repair in the order's history.
func TestReconcilerLeaseOneInstanceRuns(t *testing.T) {
	t.Parallel()
	r := newRecon(t)
	o := r.stale(t, "two-instances", 5*time.Minute, order.PaySucceeded)
	second := orderapp.New(r.db, func() {}, quiet, orderapp.Config{
		Deadlines: order.Deadlines{Participant: time.Hour, Payment: time.Hour},
		Reconcile: orderapp.ReconcileConfig{Grace: time.Minute, RefundGrace: time.Minute, Batch: 50},
		Peers:     peerclient.New(r.inventory.srv.URL, r.payment.srv.URL, adminToken, 2*time.Second),
	})

	gate, first := r.runPaused(t, instance.With(context.Background(), "order-1"), "schedule")
	ctx2 := instance.With(context.Background(), "order-2")
	// The first holds the lease: the second's scheduled run skips.
	if sum, err := second.Reconcile(ctx2, "schedule"); !errors.Is(err, orderapp.ErrReconcilerBusy) || sum.Checked != 0 {
		t.Fatalf("second instance's scheduled run: checked %d, err %v; want skipped with ErrReconcilerBusy", sum.Checked, err)
	}
	// An operator's run on the second waits for the lease.
	op := testutil.Go(func() (orderapp.RunSummary, error) { return second.Reconcile(ctx2, "admin") })
	gate.Release()
	res := <-first
	if res.Err != nil || len(res.Value.Repairs) != 1 || res.Value.Repairs[0].Outcome != orderapp.OutcomeRepaired {
		t.Fatalf("first instance: %+v, %v; want one repair", res.Value, res.Err)
	}
	res2 := <-op
	if res2.Err != nil {
		t.Fatalf("operator's run on the second instance: %v", res2.Err)
	}
	if len(res2.Value.Repairs) != 0 {
		t.Errorf("the second instance repaired again: %+v", res2.Value.Repairs)
	}

	if s := r.status(t, o.ID).Status; s != order.Confirmed {
		t.Errorf("order %s, want confirmed", s)
	}
	audits := r.audits(t, o.ID)
	if len(audits) != 1 {
		t.Fatalf("%d audit rows, want 1 (not doubled): %+v", len(audits), audits)
	}
	var by string
	if err := r.db.Get(&by, `SELECT COALESCE(instance, '') FROM reconciliation_audit WHERE order_id = ?`, o.ID); err != nil || by != "order-1" {
		t.Errorf("audit row's instance %q (%v), want order-1", by, err)
	}
	var repairs int
	if err := r.db.Get(&repairs, `SELECT COUNT(*) FROM order_history WHERE order_id = ? AND actor = ? AND instance = 'order-1'`,
		o.ID, orderapp.ActorReconciler); err != nil || repairs != 1 {
		t.Errorf("reconciler changes by order-1 in the history: %d (%v), want 1", repairs, err)
	}
}

// killLeaseHolder kills the database session that holds job's lease, as a
// failover or an operator's KILL would, and returns once the server has
// ended it and freed the lock (KILL only flags the session).
func killLeaseHolder(t *testing.T, db *sqlx.DB, job string) {
	t.Helper()
	const q = `SELECT IS_USED_LOCK(CONCAT(DATABASE(), '.', ?))`
	var id sql.NullInt64
	if err := db.Get(&id, q, job); err != nil || !id.Valid {
		t.Fatalf("holder of the %s lease: %v (%v)", job, id, err)
	}
	if _, err := db.Exec(`KILL CONNECTION ?`, id.Int64); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, fmt.Sprintf("session %d to lose the %s lease after KILL", id.Int64, job), func() bool {
		var now sql.NullInt64
		if err := db.Get(&now, q, job); err != nil {
			t.Fatal(err)
		}
		return now.Int64 != id.Int64
	})
}

// A run's lease session is killed while the run waits before its first
// repair; a second run takes the lease and repairs both orders. The first
// run, let go, finds its lease lost and stops before it repairs anything
// or asks about the second order: one audit row per order, the second run's.
func TestReconcilerStopsWhenItsLeaseIsLost(t *testing.T) {
	t.Parallel()
	r := newRecon(t)
	var ids []uint64
	for i, ago := range []time.Duration{6 * time.Minute, 5 * time.Minute} { // scanned in this order
		ids = append(ids, r.stale(t, fmt.Sprintf("lost-%d", i), ago, order.PaySucceeded).ID)
	}

	gate, first := r.runPaused(t, context.Background(), "schedule")
	killLeaseHolder(t, r.db, orderapp.ReconcilerLease)
	second, err := r.app.Reconcile(context.Background(), "admin")
	if err != nil || len(second.Repairs) != 2 {
		t.Fatalf("the run after the kill: %+v, %v; want it to take the lease and repair both orders", second, err)
	}
	gate.Release()
	res := <-first
	if !errors.Is(res.Err, sqldb.ErrLeaseLost) || len(res.Value.Repairs) != 0 {
		t.Fatalf("the first run: %d repairs, err %v; want it stopped with ErrLeaseLost before any repair", len(res.Value.Repairs), res.Err)
	}
	for _, id := range ids {
		audits := r.audits(t, id)
		if len(audits) != 1 || audits[0].RunID != second.RunID || audits[0].Outcome != orderapp.OutcomeRepaired {
			t.Errorf("order %d: audit rows %+v, want one, repaired by the second run", id, audits)
		}
		if s := r.status(t, id).Status; s != order.Confirmed {
			t.Errorf("order %d: %s, want confirmed", id, s)
		}
	}
	if n := r.payment.hit("GET /payments/" + itoa(ids[1])); n != 1 {
		t.Errorf("payment asked %d times about the second order, want once (by the second run)", n)
	}
	if got := r.counter(t, "order_lease_lost_total", "job", orderapp.ReconcilerLease); got != 1 {
		t.Errorf("order_lease_lost_total{job=reconciler} = %v, want 1", got)
	}
}

// lockWaits counts the sessions on this schema waiting for a row lock.
func lockWaits(t *testing.T, db *sqlx.DB) int {
	t.Helper()
	const q = `SELECT COUNT(*) FROM information_schema.INNODB_TRX x
JOIN information_schema.PROCESSLIST p ON p.ID = x.trx_mysql_thread_id
WHERE x.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()`
	return getOne[int](t, db, q)
}

// The lease is lost after the first run's check, while its repair waits
// for the order's row lock (held here by the test): a second run takes the
// lease and reaches the same repair. Both go on when the lock is let go;
// one repairs, the other's repair rolls back on the audit row's key. One
// audit row, one repair in the history, one order.confirmed.
func TestTwoRunsPastTheirLeaseCheckAuditARepairOnce(t *testing.T) {
	t.Parallel()
	r := newRecon(t)
	o := r.stale(t, "past-the-check", 5*time.Minute, order.PaySucceeded)
	ctx := context.Background()

	gate, first := r.runPaused(t, ctx, "schedule")
	hold, err := r.db.Beginx()
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback()
	if _, err := hold.Exec(`SELECT id FROM orders WHERE id = ? FOR UPDATE`, o.ID); err != nil {
		t.Fatal(err)
	}
	gate.Release()
	waitForLockWaits(t, r.db, 1) // the first run passed its lease check
	killLeaseHolder(t, r.db, orderapp.ReconcilerLease)
	second := testutil.Go(func() (orderapp.RunSummary, error) { return r.app.Reconcile(ctx, "admin") })
	waitForLockWaits(t, r.db, 2)
	if err := hold.Rollback(); err != nil {
		t.Fatal(err)
	}

	var repairs []orderapp.RepairSummary
	for _, res := range []testutil.Returned[orderapp.RunSummary]{<-first, <-second} {
		if res.Err != nil {
			t.Fatalf("run %s: %v", res.Value.RunID, res.Err)
		}
		repairs = append(repairs, res.Value.Repairs...)
	}
	if len(repairs) != 1 || repairs[0].Outcome != orderapp.OutcomeRepaired {
		t.Fatalf("repairs of the two runs: %+v, want one, repaired", repairs)
	}
	if audits := r.audits(t, o.ID); len(audits) != 1 || audits[0].Outcome != orderapp.OutcomeRepaired {
		t.Fatalf("audit rows %+v, want one, repaired", audits)
	}
	if s := r.status(t, o.ID).Status; s != order.Confirmed {
		t.Errorf("order %s, want confirmed", s)
	}
	if n := len(outboxOf(r.fixture, t, o.ID, events.OrderConfirmed)); n != 1 {
		t.Errorf("%d order.confirmed rows, want 1", n)
	}
	moves := 0
	for _, h := range r.history(t, o.ID) {
		if h.Actor == orderapp.ActorReconciler {
			moves++
		}
	}
	if moves != 1 {
		t.Errorf("%d reconciler changes in the history, want 1", moves)
	}
}

// waitForLockWaits waits until n sessions wait for a row lock. The server
// refreshes INNODB_TRX only when it was not read for 0.1 s: a faster poll
// would read the same stale copy for ever.
func waitForLockWaits(t *testing.T, db *sqlx.DB, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for lockWaits(t, db) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions never waited for the order's row lock", n)
		}
		time.Sleep(150 * time.Millisecond)
	}
}

// Twenty operators ask for a run while another holds the lease, on a pool
// of the default size (16): the service still answers while they wait,
// and every one of them gets its run (or is told busy) once the holder is
// done. An operator's run that waited in GET_LOCK held a pool connection
// for up to 20 s; sixteen of them took the whole pool.
func TestAdminRunsWaitWithoutTakingThePool(t *testing.T) {
	t.Parallel()
	r := newRecon(t)
	o := r.stale(t, "operators", 5*time.Minute, order.PaySucceeded)
	ctx := context.Background()
	pool, err := sqldb.Open(ctx, sqldb.Config{DSN: r.dsn})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	app := orderapp.New(pool, func() {}, quiet, orderapp.Config{
		Deadlines: order.Deadlines{Participant: time.Hour, Payment: time.Hour},
		Reconcile: orderapp.ReconcileConfig{Grace: time.Minute, RefundGrace: time.Minute, Batch: 50},
		Peers:     peerclient.New(r.inventory.srv.URL, r.payment.srv.URL, adminToken, 2*time.Second),
	})

	gate, first := r.runPaused(t, ctx, "schedule")
	const operators = 20
	runs := make(chan error, operators)
	for range operators {
		go func() {
			_, err := app.Reconcile(ctx, "admin")
			runs <- err
		}()
	}
	time.Sleep(200 * time.Millisecond) // let the runs queue up; the result does not depend on it
	for i := range 5 {
		// Bounded so that a pool held by the waiting runs fails here
		// instead of hanging until their wait ends.
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := app.Get(qctx, o.ID)
		cancel()
		if err != nil {
			gate.Release()
			t.Fatalf("read %d while %d operators' runs wait: %v (pool %+v)", i, operators, err, pool.Stats())
		}
	}
	gate.Release()
	if res := <-first; res.Err != nil || len(res.Value.Repairs) != 1 {
		t.Fatalf("the run holding the lease: %+v, %v", res.Value, res.Err)
	}
	busy := 0
	for range operators {
		switch err := <-runs; {
		case errors.Is(err, orderapp.ErrReconcilerBusy):
			busy++
		case err != nil:
			t.Errorf("operator's run: %v", err)
		}
	}
	t.Logf("%d of %d operators' runs ran, %d were told busy", operators-busy, operators, busy)
	if audits := r.audits(t, o.ID); len(audits) != 1 {
		t.Errorf("%d audit rows, want 1", len(audits))
	}
}

// A sweep's lease session is killed while the sweep waits before its first
// order; a second sweep takes the lease, asks payment about both orders and
// cancels them. The first sweep, let go, finds its lease lost and stops
// before asking payment again: each order asked once and cancelled once.
func TestDeadlineSweepStopsWhenItsLeaseIsLost(t *testing.T) {
	t.Parallel()
	f := newDeadlineFixture(t)
	ctx := context.Background()
	var ids []uint64
	for _, key := range []string{"lost-a", "lost-b"} {
		o := f.create(t, key)
		f.deliver(t, reserved(t, o))
		f.payment.setOutcome(o.ID, order.OutcomeDeclined)
		f.age(t, o.ID, 0)
		ids = append(ids, o.ID)
	}
	fp := failpoint.NewRegistry()
	gate := fp.Pause(orderapp.FailpointDeadlineBeforeCancel, 1)
	first := make(chan error, 1)
	go func() { first <- f.app.SweepDeadlines(failpoint.WithRegistry(ctx, fp), 10) }()
	select {
	case <-gate.Reached():
	case <-time.After(10 * time.Second):
		t.Fatal("the sweep never reached its first order")
	}
	killLeaseHolder(t, f.db, orderapp.DeadlineSweepLease)
	other, _ := f.newApp()
	if err := other.SweepDeadlines(ctx, 10); err != nil {
		t.Fatalf("the sweep after the kill: %v, want it to take the lease", err)
	}
	gate.Release()
	if err := <-first; !errors.Is(err, sqldb.ErrLeaseLost) {
		t.Fatalf("the first sweep: %v, want it stopped with ErrLeaseLost", err)
	}
	for _, id := range ids {
		if n := f.payment.hit("GET /payments/" + itoa(id) + "/outcome"); n != 1 {
			t.Errorf("order %d: payment asked %d times, want once", id, n)
		}
		if s := f.status(t, id).Status; s != order.Cancelled {
			t.Errorf("order %d: %s, want cancelled", id, s)
		}
		if n := len(outboxOf(f.fixture, t, id, events.OrderCancelled)); n != 1 {
			t.Errorf("order %d: %d order.cancelled rows, want 1", id, n)
		}
	}
	if got := (&recon{reg: f.reg}).counter(t, "order_lease_lost_total", "job", orderapp.DeadlineSweepLease); got != 1 {
		t.Errorf("order_lease_lost_total{job=deadline-sweep} = %v, want 1", got)
	}
}
