package inventoryapp_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/internal/testutil"
)

// metrics scrapes the app's collector: series -> value.
func (f *fixture) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(f.app.Collector())
	return testutil.Series(t, reg)
}

func wantMetrics(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

// A gap left open past its deadline is overdue: the gauge counts it, and the
// gap check logs it once (once across instances: alerted_at is a
// compare-and-set). The late event still resolves it.
func TestOverdueGap(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.process(t, cancelled(t, 1))
	f.process(t, cancelled(t, 2))
	wantMetrics(t, f.metrics(t), map[string]float64{
		`inventory_event_gaps{state="open"}`: 2, `inventory_event_gaps{state="overdue"}`: 0})
	if n, err := f.app.CheckGaps(context.Background()); err != nil || n != 0 {
		t.Errorf("CheckGaps before any deadline = %d, %v; want 0", n, err)
	}

	f.db.MustExec(`UPDATE event_gaps SET deadline_at = NOW(6) - INTERVAL 1 SECOND WHERE aggregate_id = 1`)
	wantMetrics(t, f.metrics(t), map[string]float64{
		`inventory_event_gaps{state="open"}`: 1, `inventory_event_gaps{state="overdue"}`: 1})
	if n, err := f.app.CheckGaps(context.Background()); err != nil || n != 1 {
		t.Errorf("CheckGaps = %d, %v; want the overdue gap reported", n, err)
	}
	if n, err := f.app.CheckGaps(context.Background()); err != nil || n != 0 {
		t.Errorf("second CheckGaps = %d, %v; want 0 (reported once)", n, err)
	}
	if g := f.gaps(t, 1); len(g) != 1 || !g[0].Overdue || g[0].AlertedAt.IsZero() {
		t.Errorf("gap = %+v, want overdue and alerted", g)
	}
	open, err := f.app.Gaps(context.Background(), true, 100)
	if err != nil || len(open) != 2 {
		t.Errorf("open gaps = %+v, %v; want 2", open, err)
	}

	f.process(t, created(t, 1, item("SKU-1", 1)))
	wantMetrics(t, f.metrics(t), map[string]float64{
		`inventory_event_gaps{state="open"}`: 1, `inventory_event_gaps{state="overdue"}`: 0})
	f.wantStock(t, nil)
}

// The expiry and commit-failed counts come from the tables: exact, and the
// same on every instance.
func TestLeaseMetrics(t *testing.T) {
	t.Parallel()
	f := setup(t)
	wantMetrics(t, f.metrics(t), map[string]float64{"inventory_reservations_expired_total": 0,
		"inventory_commit_failed_total": 0, "inventory_reservations_past_lease": 0})

	f.process(t, created(t, 1, item("SKU-LIMITED", 1)))
	f.process(t, created(t, 2, item("SKU-1", 1)))
	f.endLease(t, 1)
	f.endLease(t, 2)
	wantMetrics(t, f.metrics(t), map[string]float64{"inventory_reservations_past_lease": 2})
	f.sweep(t)
	f.process(t, created(t, 3, item("SKU-LIMITED", 1)))
	f.process(t, confirmed(t, 1)) // stock gone: commit_failed
	f.process(t, confirmed(t, 2)) // taken again: committed
	wantMetrics(t, f.metrics(t), map[string]float64{"inventory_reservations_expired_total": 2,
		"inventory_commit_failed_total": 1, "inventory_reservations_past_lease": 0})
}
