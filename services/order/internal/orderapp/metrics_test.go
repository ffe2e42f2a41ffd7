package orderapp_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/services/order/internal/order"
)

// orders_oldest_open_age_seconds, orders_past_deadline and
// reconciliation_needs_attention are read from the tables at scrape time:
// an order stuck in a state shows its age even when every queue is empty.
func TestOpenOrderGauges(t *testing.T) {
	t.Parallel()
	f := newDeadlineFixture(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(f.app.Collector())
	gauges := func() map[string]float64 { return testutil.Series(t, reg) }
	if g := gauges(); g["orders_past_deadline"] != 0 || g[`orders_oldest_open_age_seconds{status="pending_inventory"}`] != 0 ||
		g["reconciliation_needs_attention"] != 0 || len(g) != 4 {
		t.Fatalf("empty table: %v, want four series at 0", g)
	}
	o := f.overdue(t, "old", order.PendingInventory)
	if _, err := f.db.Exec(`UPDATE orders SET created_at = TIMESTAMPADD(SECOND, -90, NOW(6)) WHERE id = ?`, o.ID); err != nil {
		t.Fatal(err)
	}
	g := gauges()
	if age := g[`orders_oldest_open_age_seconds{status="pending_inventory"}`]; age < 90 || age > 120 {
		t.Fatalf("oldest pending_inventory age = %v, want about 90 s (%v)", age, g)
	}
	if g[`orders_oldest_open_age_seconds{status="awaiting_payment"}`] != 0 || g["orders_past_deadline"] != 1 {
		t.Fatalf("gauges = %v, want awaiting_payment 0 and one order past its deadline", g)
	}
}
