package sqldb_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/pkg/sqldb"
	"github.com/relmsg/ordersaga/pkg/sqldb/sqldbtest"
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
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
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
		}()
	}
	close(start)
	wg.Wait()
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
