package inventoryapp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorydb"
)

// Event gaps (the chapter: dedupe does not solve ordering). A gap is
// recorded in the inbox transaction of the event that reveals it (today: an
// OrderCancelled for an order whose OrderCreated was not seen; see
// recordGap) and resolved in the inbox transaction of the late event
// (createNotApplied). The business outcome never waits for it: the cancel
// marker already makes the late create harmless. The gap is the evidence
// that an event was missing, and an alarm when it stays missing: once past
// its deadline it is overdue, counted by inventory_event_gaps{state="overdue"},
// logged once by the gap check and listed by GET /admin/gaps?open=true.

// MaxGapList bounds one listing of gaps.
const MaxGapList = 1000

// Gaps lists up to limit gaps, newest first; openOnly leaves out the
// resolved ones.
func (a *App) Gaps(ctx context.Context, openOnly bool, limit int) ([]inventory.Gap, error) {
	if limit < 1 || limit > MaxGapList {
		return nil, fmt.Errorf("%w: limit must be between 1 and %d", inventory.ErrInvalid, MaxGapList)
	}
	return inventorydb.ListGaps(ctx, a.db, openOnly, limit)
}

// OrderGaps lists the gaps recorded for one order, oldest first.
func (a *App) OrderGaps(ctx context.Context, orderID uint64) ([]inventory.Gap, error) {
	return inventorydb.OrderGaps(ctx, a.db, orderID)
}

// ResolveGap is an operator closing an open gap whose missing event will
// not come (after checking the order's history at its source), with a note
// saying why. It returns the resolved gap; inventory.ErrNoGap or
// inventory.ErrGapResolved when there is no open gap with that id.
func (a *App) ResolveGap(ctx context.Context, id uint64, note string) (inventory.Gap, error) {
	note = strings.TrimSpace(note)
	if note == "" {
		return inventory.Gap{}, fmt.Errorf("%w: a resolution note is required", inventory.ErrInvalid)
	}
	ok, err := inventorydb.ResolveGap(ctx, a.db, id, "operator: "+note)
	if err != nil {
		return inventory.Gap{}, err
	}
	g, err := inventorydb.GetGap(ctx, a.db, id)
	if err != nil {
		return inventory.Gap{}, err
	}
	if !ok {
		return g, inventory.ErrGapResolved
	}
	a.log.WarnContext(ctx, "operator resolved an event gap", "gap_id", id, "order_id", g.OrderID, "event_id", g.EventID,
		"resolution", g.Resolution)
	return g, nil
}

// gapCheckBatch bounds one round of the gap check.
const gapCheckBatch = 100

// CheckGaps is one round of the gap check: every open gap past its deadline
// that was not reported yet is logged once, at error level, with what is
// missing; alerted_at (a compare-and-set) makes it once across instances.
// It returns how many it reported. The metric counts overdue gaps on every
// scrape regardless.
func (a *App) CheckGaps(ctx context.Context) (int, error) {
	gaps, err := inventorydb.OverdueNotAlerted(ctx, a.db, gapCheckBatch)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, g := range gaps {
		claimed, err := inventorydb.MarkAlerted(ctx, a.db, g.ID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !claimed {
			continue // another instance reported it, or it was resolved meanwhile
		}
		n++
		a.log.ErrorContext(ctx, "event gap overdue: an earlier event of the order never arrived",
			"gap_id", g.ID, "order_id", g.OrderID, "event_id", g.EventID, "event_type", g.EventType,
			"expected_version", g.ExpectedVersion, "received_version", g.ReceivedVersion,
			"detected_at", g.DetectedAt, "deadline_at", g.DeadlineAt)
	}
	return n, errors.Join(errs...)
}

// RunGapCheck runs CheckGaps every interval until ctx ends. Errors are
// logged, never returned.
func (a *App) RunGapCheck(ctx context.Context, interval time.Duration) error {
	log := a.log.With("job", "gap-check")
	retry.EveryFromNow(ctx, interval, func() {
		if _, err := a.CheckGaps(ctx); err != nil && ctx.Err() == nil {
			log.ErrorContext(ctx, "gap check failed; retrying next tick", "err", err)
		}
	})
	return nil
}
