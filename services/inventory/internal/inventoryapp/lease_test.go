package inventoryapp_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventoryapp"
)

// wantEvents checks the types and versions of an order's outbox events.
func (f *fixture) wantEvents(t *testing.T, orderID uint64, want ...string) []outboxRow {
	t.Helper()
	out := f.outbox(t, orderID)
	var got []string
	for _, e := range out {
		got = append(got, e.Type)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("order %d events = %v, want %v", orderID, got, want)
	}
	for i, e := range out {
		if e.AggregateVersion != uint64(i+1) {
			t.Errorf("order %d event %d (%s): aggregate_version %d, want %d", orderID, i, e.Type, e.AggregateVersion, i+1)
		}
	}
	return out
}

func reason(t *testing.T, e outboxRow) string {
	t.Helper()
	var p struct {
		OrderID string `json:"order_id"`
		Reason  string `json:"reason"`
	}
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		t.Fatal(err)
	}
	return p.Reason
}

// A reservation past its lease is released exactly (stock back to where it
// was), marked expired, and announced with InventoryReservationExpired at
// the next aggregate_version; a second sweep finds nothing to do.
func TestLeaseExpiryReleasesTheStock(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.process(t, created(t, 1, item("SKU-3", 5), item("SKU-1", 2)))
	f.process(t, created(t, 2, item("SKU-1", 1))) // within its lease: untouched
	if round := f.sweep(t); round.Found != 0 || round.Expired != 0 {
		t.Fatalf("sweep before any lease ran out = %+v, want nothing", round)
	}
	f.endLease(t, 1)

	if round := f.sweep(t); round.Found != 1 || round.Expired != 1 {
		t.Fatalf("sweep = %+v, want 1 found, 1 expired", round)
	}
	f.wantStock(t, map[string][2]int64{"SKU-1": {0, 1}}) // only order 2's hold is left
	r := f.reservation(t, 1)
	if r.Status != inventory.Expired || r.Version != 2 || r.ExpiredAt.IsZero() || len(r.Items) != 2 {
		t.Errorf("reservation = %+v, want expired, version 2, expired_at set, items kept", r)
	}
	out := f.wantEvents(t, 1, events.InventoryReserved, events.InventoryReservationExpired)
	var p events.InventoryReservationExpiredV1
	if err := json.Unmarshal(out[1].Payload, &p); err != nil || p.Validate() != nil || p.OrderID != 1 || p.Reason == "" {
		t.Errorf("InventoryReservationExpired payload = %s (%v), want order 1 with a reason", out[1].Payload, err)
	}
	f.wantStatus(t, 2, inventory.Reserved) // its lease is not over

	if round := f.sweep(t); round.Found != 0 || round.Expired != 0 {
		t.Errorf("second sweep = %+v, want nothing", round)
	}
	f.wantStock(t, map[string][2]int64{"SKU-1": {0, 1}})
	f.wantEvents(t, 1, events.InventoryReserved, events.InventoryReservationExpired)
}

// Only reserved rows have a lease to run out: rejections and cancel markers
// have none, and the sweep never touches them.
func TestOnlyReservedRowsHaveALease(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.process(t, created(t, 1, item("SKU-LIMITED", 2))) // rejected
	f.process(t, cancelled(t, 2))                       // marker
	f.process(t, created(t, 3, item("SKU-1", 1)))
	if r := f.reservation(t, 3); r.ExpiresAt.IsZero() {
		t.Errorf("reserved row: expires_at not set")
	}
	for _, id := range []uint64{1, 2} {
		if r := f.reservation(t, id); !r.ExpiresAt.IsZero() {
			t.Errorf("order %d (%s): expires_at = %v, want none", id, r.Status, r.ExpiresAt)
		}
	}
	f.db.MustExec(`UPDATE reservations SET expires_at = NOW(6) - INTERVAL 1 SECOND`) // even if one had
	if round := f.sweep(t); round.Expired != 1 {
		t.Errorf("sweep = %+v, want only the reserved order expired", round)
	}
	for id, want := range map[uint64]inventory.Status{1: inventory.Rejected, 2: inventory.CancelledBeforeReserve, 3: inventory.Expired} {
		f.wantStatus(t, id, want)
	}
}

// Several sweepers (instances) over the same expired rows, released
// together: each reservation is expired and released once, one event each.
func TestSweepersRacingReleaseOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const orders, sweepers = 12, 6
	for i := range orders {
		f.process(t, created(t, uint64(100+i), item("SKU-1", 1), item("SKU-4", 2)))
	}
	f.db.MustExec(`UPDATE reservations SET expires_at = NOW(6) - INTERVAL 1 SECOND`)

	rounds := make([]inventoryapp.SweepRound, sweepers)
	errs := make([]error, sweepers)
	testutil.Together(sweepers, func(i int) {
		rounds[i], errs[i] = f.app.ExpireLeases(context.Background(), 100)
	})

	total := 0
	for i := range sweepers {
		if errs[i] != nil {
			t.Errorf("sweeper %d: %v", i, errs[i])
		}
		total += rounds[i].Expired
	}
	if total != orders {
		t.Errorf("expired by all sweepers = %d (rounds %+v), want %d", total, rounds, orders)
	}
	f.wantStock(t, nil)
	if n := f.eventCount(t, events.InventoryReservationExpired); n != orders {
		t.Errorf("InventoryReservationExpired events = %d, want %d", n, orders)
	}
	if n := f.count(t, `SELECT COUNT(*) FROM reservations WHERE status = 'expired' AND aggregate_version = 2`); n != orders {
		t.Errorf("expired reservations at version 2 = %d, want %d", n, orders)
	}
}

// The race made certain: sweeper A has read its candidates and is paused
// before its compare-and-set; sweeper B expires them all; A resumes and its
// compare-and-set changes nothing. Stock is released once.
func TestSweeperThatLostTheRaceChangesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const before = 3
	for i := range before {
		f.process(t, created(t, uint64(200+i), item("SKU-1", 1), item("SKU-2", 3)))
	}
	f.db.MustExec(`UPDATE reservations SET expires_at = NOW(6) - INTERVAL 1 SECOND`)

	reg := failpoint.NewRegistry()
	gate := reg.Pause(inventoryapp.FailpointBeforeExpire, 1)
	ctx := failpoint.WithRegistry(context.Background(), reg)
	done := testutil.Go(func() (inventoryapp.SweepRound, error) { return f.app.ExpireLeases(ctx, 100) })
	<-gate.Reached()
	b, err := f.app.ExpireLeases(ctx, 100) // the point is spent: B passes
	if err != nil || b.Expired != before {
		t.Fatalf("sweeper B = %+v, %v; want %d expired", b, err, before)
	}
	gate.Release()
	a := <-done
	if a.Err != nil || a.Value.Found != before || a.Value.Expired != 0 {
		t.Errorf("sweeper A = %+v, %v; want %d found and none expired", a.Value, a.Err, before)
	}
	f.wantStock(t, nil)
	if n := f.eventCount(t, events.InventoryReservationExpired); n != before {
		t.Errorf("InventoryReservationExpired events = %d, want %d", n, before)
	}
}

// Payment wins: the confirm commits the sale before the lease runs out; the
// sweep then leaves the committed reservation alone, even with its lease
// over.
func TestPaymentWinsTheRace(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.process(t, created(t, 1, item("SKU-1", 2), item("SKU-3", 5)))
	f.process(t, confirmed(t, 1))
	if round := f.expire(t, 1); round.Found != 0 {
		t.Errorf("sweep = %+v, want nothing: the reservation is committed", round)
	}
	f.wantStock(t, map[string][2]int64{"SKU-1": {-2, 0}, "SKU-3": {-5, 0}})
	if r := f.reservation(t, 1); r.Status != inventory.Committed || !r.ExpiredAt.IsZero() {
		t.Errorf("reservation = %+v, want committed, never expired", r)
	}
	f.wantEvents(t, 1, events.InventoryReserved)
}

// Expiry wins, the stock is still there: the late confirm takes it again
// and commits. on_hand goes down by the quantities, reserved is unchanged
// (nothing is held any more), and no event is needed.
func TestExpiryWinsStockStillThere(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.process(t, created(t, 1, item("SKU-1", 2), item("SKU-3", 5)))
	f.process(t, created(t, 2, item("SKU-3", 4))) // another order's hold stays untouched
	f.expire(t, 1)
	f.wantStock(t, map[string][2]int64{"SKU-3": {0, 4}})

	f.process(t, confirmed(t, 1))
	f.wantStock(t, map[string][2]int64{"SKU-1": {-2, 0}, "SKU-3": {-5, 4}})
	r := f.reservation(t, 1)
	if r.Status != inventory.Committed || r.Version != 2 || !strings.Contains(r.Reason, "after the lease expired") || r.ExpiredAt.IsZero() {
		t.Errorf("reservation = %+v, want committed, version 2, reason naming the expiry, expired_at kept", r)
	}
	f.wantEvents(t, 1, events.InventoryReserved, events.InventoryReservationExpired)

	// A redelivered confirm (another event id) sells nothing more; a cancel
	// after it restocks what was sold.
	f.process(t, confirmed(t, 1))
	f.wantStock(t, map[string][2]int64{"SKU-1": {-2, 0}, "SKU-3": {-5, 4}})
	f.process(t, cancelled(t, 1))
	f.wantStock(t, map[string][2]int64{"SKU-3": {0, 4}})
	f.wantStatus(t, 1, inventory.Restocked) // after the cancel
}

// Expiry wins and the stock is gone: another order took the released last
// unit. The late confirm takes nothing (the SKU-1 it could take is undone:
// all or none), the reservation ends commit_failed, and one
// InventoryCommitFailed tells the order to cancel and refund.
func TestExpiryWinsStockGone(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.process(t, created(t, 1, item("SKU-LIMITED", 1), item("SKU-1", 2)))
	f.expire(t, 1)
	f.process(t, created(t, 2, item("SKU-LIMITED", 1))) // takes the released unit
	f.wantStock(t, map[string][2]int64{"SKU-LIMITED": {0, 1}})

	f.process(t, confirmed(t, 1))
	f.wantStock(t, map[string][2]int64{"SKU-LIMITED": {0, 1}}) // no stock change
	r := f.reservation(t, 1)
	wantReason := "order confirmed after the lease expired; insufficient stock for SKU-LIMITED: requested 1, available 0"
	if r.Status != inventory.CommitFailed || r.Version != 3 || r.Reason != wantReason {
		t.Errorf("reservation = %+v, want commit_failed, version 3, reason %q", r, wantReason)
	}
	out := f.wantEvents(t, 1, events.InventoryReserved, events.InventoryReservationExpired, events.InventoryCommitFailed)
	if got := reason(t, out[2]); got != wantReason {
		t.Errorf("InventoryCommitFailed reason = %q, want %q", got, wantReason)
	}
	var p events.InventoryCommitFailedV1
	if err := json.Unmarshal(out[2].Payload, &p); err != nil || p.Validate() != nil || p.OrderID != 1 {
		t.Errorf("InventoryCommitFailed payload = %s (%v), want order 1", out[2].Payload, err)
	}

	// Terminal: another confirm, and the cancel the order sends in answer,
	// change nothing and emit nothing.
	f.process(t, confirmed(t, 1))
	f.process(t, cancelled(t, 1))
	f.wantStock(t, map[string][2]int64{"SKU-LIMITED": {0, 1}})
	f.wantStatus(t, 1, inventory.CommitFailed)
	f.wantEvents(t, 1, events.InventoryReserved, events.InventoryReservationExpired, events.InventoryCommitFailed)
}

// A cancel for an expired reservation releases nothing more (the expiry
// did) and emits nothing; it closes the reservation so that a confirm that
// arrives after it (a cancel-after-confirm that overtook its confirm)
// cannot take stock for a cancelled order.
func TestCancelAfterExpiryChangesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.process(t, created(t, 1, item("SKU-1", 2), item("SKU-LIMITED", 1)))
	f.expire(t, 1)
	f.wantStock(t, nil)

	f.process(t, cancelled(t, 1))
	f.wantStock(t, nil)
	r := f.reservation(t, 1)
	if r.Status != inventory.Released || r.Version != 2 || !strings.Contains(r.Reason, "after the lease expired") {
		t.Errorf("reservation = %+v, want released, version 2, reason naming the expiry", r)
	}
	f.wantEvents(t, 1, events.InventoryReserved, events.InventoryReservationExpired)

	f.process(t, confirmed(t, 1))
	f.wantStock(t, nil)
	f.wantStatus(t, 1, inventory.Released) // after a late confirm
	f.wantEvents(t, 1, events.InventoryReserved, events.InventoryReservationExpired)
}

// A confirm and the sweep racing for the same reservation, in many orders at
// once: whichever commits first, every order ends committed with its stock
// sold exactly once (the stock is plentiful, so a confirm that comes second
// takes it again).
func TestConfirmAndSweepRacing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const n = 10
	var confirms []events.Envelope
	for i := range n {
		id := uint64(300 + i)
		f.process(t, created(t, id, item("SKU-2", 3), item("SKU-1", 1)))
		confirms = append(confirms, confirmed(t, id))
	}
	f.db.MustExec(`UPDATE reservations SET expires_at = NOW(6) - INTERVAL 1 SECOND`)

	// The sweep and every confirm, each on its own goroutine and
	// connection, released together.
	errs := make([]error, n+1)
	testutil.Together(n+1, func(i int) {
		if i == n {
			_, errs[i] = f.app.ExpireLeases(context.Background(), 100)
			return
		}
		errs[i] = f.c.Process(context.Background(), confirms[i])
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("goroutine %d (%d is the sweep): %v", i, n, err)
		}
	}
	f.wantStock(t, map[string][2]int64{"SKU-1": {-n, 0}, "SKU-2": {-3 * n, 0}})
	expired := 0
	for i := range n {
		r := f.reservation(t, uint64(300+i))
		if r.Status != inventory.Committed {
			t.Errorf("order %d: status %s, want committed", 300+i, r.Status)
		}
		if !r.ExpiredAt.IsZero() {
			expired++
		}
	}
	t.Logf("the sweep won %d of %d races", expired, n)
}

// A failure after the release and the event, before the commit, rolls all
// of it back: the reservation stays reserved and held, nothing is
// announced, and the next round expires it once.
func TestExpiryFailureBeforeCommitLeavesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.process(t, created(t, 1, item("SKU-1", 2), item("SKU-2", 3)))
	f.endLease(t, 1)
	reg := failpoint.NewRegistry()
	reg.Error(inventoryapp.FailpointExpireBeforeCommit, 1)
	ctx := failpoint.WithRegistry(context.Background(), reg)

	round, err := f.app.ExpireLeases(ctx, 100)
	if !errors.Is(err, failpoint.ErrInjected) || round.Found != 1 || round.Expired != 0 {
		t.Fatalf("ExpireLeases = %+v, %v; want 1 found, 0 expired and the injected error", round, err)
	}
	f.wantStock(t, map[string][2]int64{"SKU-1": {0, 2}, "SKU-2": {0, 3}})
	if r := f.reservation(t, 1); r.Status != inventory.Reserved || r.Version != 1 || !r.ExpiredAt.IsZero() {
		t.Errorf("reservation = %+v, want still reserved at version 1", r)
	}
	f.wantEvents(t, 1, events.InventoryReserved)

	if round, err := f.app.ExpireLeases(ctx, 100); err != nil || round.Expired != 1 {
		t.Fatalf("next round = %+v, %v; want it expired", round, err)
	}
	f.wantStock(t, nil)
	f.wantEvents(t, 1, events.InventoryReserved, events.InventoryReservationExpired)
}
