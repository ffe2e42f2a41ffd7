package inventoryapp_test

import (
	"context"
	"strings"
	"testing"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventoryapp"
)

// race processes every envelope on its own goroutine (and so its own pooled
// connection), all released together, and returns their errors.
func race(f *fixture, evs []events.Envelope) []error {
	errs := make([]error, len(evs))
	testutil.Together(len(evs), func(i int) {
		errs[i] = f.c.Process(context.Background(), evs[i])
	})
	return errs
}

// createdEach is the OrderCreated of n orders, ids first, first+1, ...;
// items(i) is what the i-th orders.
func createdEach(t *testing.T, first uint64, n int, items func(i int) []events.Item) []events.Envelope {
	t.Helper()
	evs := make([]events.Envelope, n)
	for i := range evs {
		evs[i] = created(t, first+uint64(i), items(i)...)
	}
	return evs
}

// raceAll races evs (race) and fails the test for each one that did not
// process.
func raceAll(t *testing.T, f *fixture, evs []events.Envelope) {
	t.Helper()
	for i, err := range race(f, evs) {
		if err != nil {
			t.Errorf("%s for order %d: %v", evs[i].Type, evs[i].AggregateID, err)
		}
	}
}

// N orders race for the last unit of SKU-LIMITED: exactly one wins. The
// check and the change are one conditional UPDATE, so there is no lost
// update and no oversell.
func TestOrdersRacingForTheLastUnit(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const n = 20
	raceAll(t, f, createdEach(t, 100, n, func(int) []events.Item { return []events.Item{item("SKU-LIMITED", 1)} }))

	f.wantStock(t, map[string][2]int64{"SKU-LIMITED": {0, 1}})
	counts := map[inventory.Status]int{}
	for i := range n {
		counts[f.reservation(t, uint64(100+i)).Status]++
	}
	if counts[inventory.Reserved] != 1 || counts[inventory.Rejected] != n-1 {
		t.Errorf("statuses = %v, want 1 reserved and %d rejected", counts, n-1)
	}
	if got := f.eventCount(t, events.InventoryReserved); got != 1 {
		t.Errorf("InventoryReserved events = %d, want 1", got)
	}
	if got := f.eventCount(t, events.InventoryRejected); got != n-1 {
		t.Errorf("InventoryRejected events = %d, want %d", got, n-1)
	}
}

// Orders naming the same SKUs in opposite orders never deadlock: every
// reservation holds its lines sorted by SKU.
func TestOppositeLineOrdersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const n = 20
	raceAll(t, f, createdEach(t, 200, n, func(i int) []events.Item {
		if i%2 == 1 {
			return []events.Item{item("SKU-3", 1), item("SKU-2", 2), item("SKU-1", 1)}
		}
		return []events.Item{item("SKU-1", 1), item("SKU-2", 2), item("SKU-3", 1)}
	}))
	f.wantStock(t, map[string][2]int64{"SKU-1": {0, n}, "SKU-2": {0, 2 * n}, "SKU-3": {0, n}})
}

// The same OrderCreated delivered on two connections at once: one business
// effect, one inbox row.
func TestSameEventOnTwoConnections(t *testing.T) {
	t.Parallel()
	f := setup(t)
	e := created(t, 300, item("SKU-1", 4))
	errs := race(f, []events.Envelope{e, e, e, e})
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		}
	}
	if ok != 1 {
		t.Errorf("successful deliveries = %d (errors %v), want 1 and the rest ErrAlreadyProcessed", ok, errs)
	}
	f.wantStock(t, map[string][2]int64{"SKU-1": {0, 4}})
	if got := f.count(t, `SELECT COUNT(*) FROM consumer_inbox`); got != 1 {
		t.Errorf("inbox rows = %d, want 1", got)
	}
}

// Create and cancel of one order, delivered at the same moment, in many
// orders at once: whichever lands first, the stock ends where it started
// and every reservation ends released or cancelled_before_reserve.
func TestCreateAndCancelRacing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const n = 15
	var evs []events.Envelope
	for i := range n {
		id := uint64(400 + i)
		evs = append(evs, created(t, id, item("SKU-1", 1), item("SKU-4", 2)), cancelled(t, id))
	}
	raceAll(t, f, evs)
	f.wantStock(t, nil)
	released := 0
	for i := range n {
		r := f.reservation(t, uint64(400+i))
		switch r.Status {
		case inventory.Released:
			released++
		case inventory.CancelledBeforeReserve:
		default:
			t.Errorf("order %d: status %s, want released or cancelled_before_reserve", 400+i, r.Status)
		}
	}
	if got := f.eventCount(t, events.InventoryReserved); got != released {
		t.Errorf("InventoryReserved events = %d, want one per released reservation (%d)", got, released)
	}
	// A gap for each cancel that won, every one resolved by its late create.
	if got := f.count(t, `SELECT COUNT(*) FROM event_gaps`); got != n-released {
		t.Errorf("gaps = %d, want one per cancel that came first (%d)", got, n-released)
	}
	if got := f.count(t, `SELECT COUNT(*) FROM event_gaps WHERE resolved_at IS NULL`); got != 0 {
		t.Errorf("open gaps = %d, want 0: every create arrived", got)
	}
	t.Logf("%d of %d creates won the race", released, n)
}

// The cancel commits its marker after the create found no reservation but
// before it inserted its own: the create's INSERT collides with the marker,
// so it reserves nothing.
func TestCancelCommitsWhileCreateHoldsStock(t *testing.T) {
	t.Parallel()
	f := setup(t)
	reg := failpoint.NewRegistry()
	gate := reg.Pause(inventoryapp.FailpointBeforeInsert, 1)
	ctx := failpoint.WithRegistry(context.Background(), reg)

	create := created(t, 500, item("SKU-1", 2), item("SKU-2", 3))
	done := make(chan error, 1)
	go func() { done <- f.c.Process(ctx, create) }()
	<-gate.Reached()
	// The create's transaction holds nothing yet; the cancel inserts its
	// marker and commits.
	f.process(t, cancelled(t, 500))
	gate.Release()
	if err := <-done; err != nil {
		t.Fatalf("create: %v", err)
	}

	f.wantStock(t, nil)
	r := f.reservation(t, 500)
	if r.Status != inventory.CancelledBeforeReserve || !strings.Contains(r.Reason, create.EventID) {
		t.Errorf("reservation = %+v, want cancelled_before_reserve naming the late create", r)
	}
	if out := f.outbox(t, 500); len(out) != 0 {
		t.Errorf("outbox = %+v, want no event", out)
	}
	if n := f.count(t, `SELECT COUNT(*) FROM consumer_inbox`); n != 2 {
		t.Errorf("inbox rows = %d, want 2 (both events processed)", n)
	}
	// The cancel recorded the gap; the create, retrying its INSERT into
	// the marker, resolved it.
	if gaps := f.gaps(t, 500); len(gaps) != 1 || gaps[0].Open() {
		t.Errorf("gaps = %+v, want one, resolved", gaps)
	}
}
