package inventoryapp

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/inbox/batch"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorydb"
)

// Store is where the consumer's locking reads and its stock and outbox
// writes go, inside its transaction. The handlers are written once against
// it: Direct makes every read and write at once, the chapter's way;
// Batched, in a consumer batch (pkg/inbox/batch), reads the batch's
// reservations once and makes the stock changes of the whole batch at its
// end, one conditional UPDATE per SKU. Either way the same rows end up
// written, or the batch fails and its events run one at a time.
type Store interface {
	batch.Store
	// LockReservation reads an order's reservation with its items, locked
	// (inventory.ErrNoReservation when there is none).
	LockReservation(ctx context.Context, orderID uint64) (inventory.Reservation, error)
	// Hold holds every line of plan, all or none, and returns the first
	// line that cannot be held (nil: all held). Direct: one conditional
	// UPDATE per line, in plan (SKU) order, the ones before a short line
	// left for the caller to undo (Savepoint, RollbackTo). Batched: the
	// holds are summed per SKU and made at the batch's end; a shortage
	// there fails the batch.
	Hold(ctx context.Context, plan []inventory.Line) (*inventory.Shortage, error)
	// Take sells every line that is not held, all or none (a late confirm
	// after the lease ran out): nil when all were taken; the line that was
	// short otherwise, with nothing taken. It answers from the stock as the
	// events before it left it: in a batch, their stock changes are made
	// first.
	Take(ctx context.Context, lines []inventory.Line) (*inventory.Shortage, error)
	// Move applies the stock effect of a reservation's move to its items:
	// Direct at once, Batched at the batch's end.
	Move(ctx context.Context, effect inventory.StockEffect, lines []inventory.Line) error
	Savepoint(ctx context.Context, name string) error
	RollbackTo(ctx context.Context, name string) error
}

// Direct is the store of one transaction, the chapter's way: its Emit
// writes to the outbox at once (batch.DirectStore).
func Direct(tx *sqlx.Tx) Store { return direct{batch.NewDirectStore(tx)} }

type direct struct{ batch.DirectStore }

func (d direct) LockReservation(ctx context.Context, orderID uint64) (inventory.Reservation, error) {
	return inventorydb.LockReservation(ctx, d.Tx(), orderID)
}

func (d direct) Hold(ctx context.Context, plan []inventory.Line) (*inventory.Shortage, error) {
	for _, l := range plan {
		ok, err := inventorydb.Hold(ctx, d.Tx(), l.SKU, l.Quantity)
		if err != nil {
			return nil, err
		}
		if !ok {
			return &inventory.Shortage{SKU: l.SKU, Requested: l.Quantity}, nil
		}
	}
	return nil, nil
}

// takeSavepoint is where a take that finds a line short returns to.
const takeSavepoint = "take_items"

func (d direct) Take(ctx context.Context, lines []inventory.Line) (*inventory.Shortage, error) {
	if err := d.Savepoint(ctx, takeSavepoint); err != nil {
		return nil, err
	}
	for _, l := range lines {
		ok, err := inventorydb.Take(ctx, d.Tx(), l.SKU, l.Quantity)
		if err != nil {
			return nil, err
		}
		if !ok {
			return &inventory.Shortage{SKU: l.SKU, Requested: l.Quantity}, d.RollbackTo(ctx, takeSavepoint)
		}
	}
	return nil, nil
}

// errDisagree: a stock row does not cover what a reservation says it holds.
var errDisagree = errors.New("stock and reservation disagree")

func (d direct) Move(ctx context.Context, effect inventory.StockEffect, lines []inventory.Line) error {
	var apply func(context.Context, *sqlx.Tx, string, int) (bool, error)
	switch effect {
	case inventory.EffectNone:
		return nil
	case inventory.EffectCommit:
		apply = inventorydb.Commit
	case inventory.EffectRelease:
		apply = inventorydb.Release
	case inventory.EffectRestock:
		apply = inventorydb.Restock
	default:
		return fmt.Errorf("unexpected stock effect %q", effect)
	}
	for _, l := range lines {
		ok, err := apply(ctx, d.Tx(), l.SKU, l.Quantity)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%s of %d %s failed: %w", effect, l.Quantity, l.SKU, errDisagree)
		}
	}
	return nil
}

func (d direct) Savepoint(ctx context.Context, name string) error {
	return inventorydb.Savepoint(ctx, d.Tx(), name)
}

func (d direct) RollbackTo(ctx context.Context, name string) error {
	return inventorydb.RollbackTo(ctx, d.Tx(), name)
}

// Batched is the store of a consumer batch. With a few busy SKUs, a batch
// of reservations would otherwise lock a SKU row in its first event and
// hold it through all the others, and two batches locking SKUs in the
// orders of their events would deadlock: the stock changes are summed per
// SKU and made right before the batch's COMMIT, one conditional UPDATE per
// SKU in SKU order (the service's lock order). The UPDATE requires the
// stock before the batch to cover every hold of the batch by itself, which
// is what each hold, one at a time in delivery order, would find (releases
// and restocks only add to it): if it does not, the batch fails and each
// event runs alone, where each reservation's own hold decides. Its events
// are written together (batch.BatchedStore).
func Batched(b *batch.Tx) Store {
	s := &batched{direct: direct{batch.NewDirectStore(b.Tx)}, BatchedStore: batch.BatchedStore{B: b},
		pending: map[string]inventorydb.StockChange{}}
	b.BeforeCommit(s.flush)
	return s
}

type batched struct {
	// direct makes the reads and the take at once; BatchedStore's Tx, Emit
	// and Log, embedded less deep, are the ones a handler gets.
	direct
	batch.BatchedStore
	pending map[string]inventorydb.StockChange // per SKU, not made yet
}

type batchReservationsKey struct{}

func (s *batched) LockReservation(ctx context.Context, orderID uint64) (inventory.Reservation, error) {
	return batch.LockOnce(s.B, batchReservationsKey{}, orderID,
		func(ids []uint64) (map[uint64]inventory.Reservation, error) {
			return inventorydb.LockReservations(ctx, s.B.Tx, ids)
		},
		func(id uint64) (inventory.Reservation, error) { return inventorydb.LockReservation(ctx, s.B.Tx, id) })
}

func (s *batched) Hold(_ context.Context, plan []inventory.Line) (*inventory.Shortage, error) {
	return nil, s.add(inventory.EffectHold, plan)
}

// Take makes the batch's pending stock changes first, so that it sees the
// stock as the events before it in the batch left it.
func (s *batched) Take(ctx context.Context, lines []inventory.Line) (*inventory.Shortage, error) {
	if err := s.flush(ctx); err != nil {
		return nil, err
	}
	return s.direct.Take(ctx, lines)
}

func (s *batched) Move(_ context.Context, effect inventory.StockEffect, lines []inventory.Line) error {
	if effect == inventory.EffectNone {
		return nil
	}
	return s.add(effect, lines)
}

// Savepoint: a batch's holds never fail on their own (a shortage fails the
// batch), so nothing returns to a hold's savepoint.
func (s *batched) Savepoint(context.Context, string) error { return nil }

func (s *batched) RollbackTo(_ context.Context, name string) error {
	return fmt.Errorf("rollback to %s inside a consumer batch: a batch never returns to a savepoint", name)
}

// add records the stock effect on each line.
func (s *batched) add(effect inventory.StockEffect, lines []inventory.Line) error {
	for _, l := range lines {
		c := s.pending[l.SKU]
		switch effect {
		case inventory.EffectHold:
			c.ReservedIn += l.Quantity
		case inventory.EffectCommit:
			c.OnHandOut += l.Quantity
			c.ReservedOut += l.Quantity
		case inventory.EffectRelease:
			c.ReservedOut += l.Quantity
		case inventory.EffectRestock:
			c.OnHandIn += l.Quantity
		default:
			return fmt.Errorf("stock effect %q is not batched", effect)
		}
		s.pending[l.SKU] = c
	}
	return nil
}

// flush makes the pending changes, in SKU order.
func (s *batched) flush(ctx context.Context) error {
	skus := make([]string, 0, len(s.pending))
	for sku := range s.pending {
		skus = append(skus, sku)
	}
	sort.Strings(skus)
	for _, sku := range skus {
		ok, err := inventorydb.Change(ctx, s.B.Tx, sku, s.pending[sku])
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("the batch's stock changes of %s do not fit its row: %+v", sku, s.pending[sku])
		}
		delete(s.pending, sku)
	}
	return nil
}
