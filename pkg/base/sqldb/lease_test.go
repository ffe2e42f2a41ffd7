package sqldb_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
)

// N goroutines released together ask for the same job's lease: one gets
// it; the others are told it is held. After the release it can be taken
// again, and a waiter gets it once the holder lets go.
func TestLeaseOneHolder(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	ctx := context.Background()
	const n = 8
	var held atomic.Int32
	var winners []*sqldb.Lease
	var mu sync.Mutex
	testutil.Together(n, func(int) {
		l, err := sqldb.TryLease(ctx, db.DB, "reconciler", 0)
		switch {
		case err == nil:
			mu.Lock()
			winners = append(winners, l)
			mu.Unlock()
		case errors.Is(err, sqldb.ErrLeaseHeld):
			held.Add(1)
		default:
			t.Errorf("TryLease: %v", err)
		}
	})
	if len(winners) != 1 || held.Load() != n-1 {
		t.Fatalf("%d holders, %d told it is held; want 1 and %d", len(winners), held.Load(), n-1)
	}
	// Another job's lease is another lock.
	other, err := sqldb.TryLease(ctx, db.DB, "deadline-sweep", 0)
	if err != nil {
		t.Fatalf("another job's lease: %v", err)
	}
	other.Release()

	// A waiter gets it once the holder releases.
	got := make(chan error, 1)
	go func() {
		l, err := sqldb.TryLease(ctx, db.DB, "reconciler", 10*time.Second)
		if err == nil {
			l.Release()
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the waiter queue up; the result does not depend on it
	winners[0].Release()
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	// The lock is named after the schema, so another schema's instances
	// are not held up.
	var name string
	l, err := sqldb.TryLease(ctx, db.DB, "reconciler", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if err := db.Get(&name, `SELECT CONCAT(DATABASE(), '.reconciler')`); err != nil || !strings.HasPrefix(name, db.Name+".") {
		t.Errorf("lock name %q (%v)", name, err)
	}
	var free int
	if err := db.Get(&free, `SELECT IS_FREE_LOCK(?)`, name); err != nil || free != 0 {
		t.Errorf("IS_FREE_LOCK(%s) = %d (%v), want 0 while held", name, free, err)
	}
}

// lockHolder returns the session id that holds job's lease in db's schema.
func lockHolder(t *testing.T, db *sqldbtest.DB, job string) int64 {
	t.Helper()
	var id sql.NullInt64
	if err := db.Get(&id, `SELECT IS_USED_LOCK(CONCAT(DATABASE(), '.', ?))`, job); err != nil || !id.Valid {
		t.Fatalf("holder of %s: %v (%v)", job, id, err)
	}
	return id.Int64
}

// The lease's session is killed while its run goes on: the server frees
// the lock and another run takes it. The first run's next Check says the
// lease is lost, so it can stop before its next change.
func TestLeaseLostWhenItsSessionIsKilled(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	ctx := context.Background()
	first, err := sqldb.TryLease(ctx, db.DB, "reconciler", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release()
	if err := first.Check(ctx); err != nil {
		t.Fatalf("Check while held: %v", err)
	}
	if _, err := db.Exec(`KILL CONNECTION ?`, lockHolder(t, db, "reconciler")); err != nil {
		t.Fatal(err)
	}
	// KILL only flags the session: the second run waits for the server
	// to end it.
	second, err := sqldb.TryLease(ctx, db.DB, "reconciler", 10*time.Second)
	if err != nil {
		t.Fatalf("a second run after the kill: %v, want the lease", err)
	}
	defer second.Release()
	if err := first.Check(ctx); !errors.Is(err, sqldb.ErrLeaseLost) {
		t.Fatalf("the first run's Check after the kill: %v, want ErrLeaseLost", err)
	}
	if err := second.Check(ctx); err != nil {
		t.Fatalf("the second run's Check: %v", err)
	}
}

// Twenty runs wait for a held lease on a pool of the default size (16):
// while they wait the pool still serves other queries, and once the
// holder lets go every waiter gets the lease in turn. A GET_LOCK that
// waited on the server held one connection per waiter: the pool ran dry
// and the service stopped answering until the waits ended.
func TestLeaseWaitersHoldNoPoolConnection(t *testing.T) {
	t.Parallel()
	test := sqldbtest.New(t, "order")
	ctx := context.Background()
	db, err := sqldb.Open(ctx, sqldb.Config{DSN: test.DSN})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	holder, err := sqldb.TryLease(ctx, db, "reconciler", 0)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 20
	errs := make(chan error, waiters)
	for range waiters {
		go func() {
			l, err := sqldb.TryLease(ctx, db, "reconciler", 60*time.Second)
			if err == nil {
				l.Release()
			}
			errs <- err
		}()
	}
	time.Sleep(200 * time.Millisecond) // let the waiters queue up; the result does not depend on it
	for i := range 5 {
		// Bounded so that a pool held by the waiters fails here instead
		// of hanging the test for their whole wait.
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var one int
		err := db.GetContext(qctx, &one, `SELECT 1`)
		cancel()
		if err != nil {
			holder.Release()
			t.Fatalf("query %d while %d runs wait for the lease: %v (pool %+v)", i, waiters, err, db.Stats())
		}
	}
	holder.Release()
	for range waiters {
		if err := <-errs; err != nil {
			t.Errorf("waiter: %v, want the lease once the holder released it", err)
		}
	}
}

// A schema-less session has no lock name: GET_LOCK answers NULL, which is
// an error, not a lease held by someone else (the job would skip quietly
// on every run).
func TestLeaseWithoutASchemaIsAnError(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("integration test: needs MariaDB/MySQL (run without -short)")
	}
	ctx := context.Background()
	db, err := sqldb.Open(ctx, sqldb.Config{DSN: sqldbtest.ServerDSN(), MaxOpenConns: 2})
	if err != nil {
		t.Fatalf("MariaDB/MySQL is required for this test: %v", err)
	}
	defer db.Close()
	l, err := sqldb.TryLease(ctx, db, "reconciler", 0)
	if err == nil {
		l.Release()
		t.Fatal("TryLease without a schema took a lease")
	}
	if errors.Is(err, sqldb.ErrLeaseHeld) {
		t.Fatalf("TryLease without a schema: %v, want an error other than ErrLeaseHeld", err)
	}
}
