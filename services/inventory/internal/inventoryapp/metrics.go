package inventoryapp

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/pkg/base/scrape"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorydb"
)

// Collector returns the inventory metrics. They are read from the tables
// at scrape time (one statement, scrape.Collector), not counted in memory:
// the numbers are the persisted truth, survive restarts, and include what
// other instances did. So every instance reports the same values:
// aggregate across instances with max(), not sum().
//
//	inventory_reservations_expired_total      reservations whose lease ran out (expired_at set)
//	inventory_commit_failed_total             late confirms that found the stock gone (status commit_failed)
//	inventory_reservations_rejected_total     business rejections (not enough stock, unknown SKU)
//	inventory_reservations_past_lease         still reserved although the lease is over: the sweep is behind or failing
//	inventory_event_gaps{state="open"}        gaps not resolved yet, within their deadline
//	inventory_event_gaps{state="overdue"}     gaps not resolved past their deadline: alert on > 0
func (a *App) Collector() prometheus.Collector {
	expired := prometheus.NewDesc("inventory_reservations_expired_total",
		"Reservations whose lease ran out and whose stock the sweep released.", nil, nil)
	commitFailed := prometheus.NewDesc("inventory_commit_failed_total",
		"Orders confirmed after their reservation expired whose stock was gone (commit_failed).", nil, nil)
	rejected := prometheus.NewDesc("inventory_reservations_rejected_total",
		"Reservations rejected as a business outcome (not enough stock, unknown SKU): results, not failures.", nil, nil)
	pastLease := prometheus.NewDesc("inventory_reservations_past_lease",
		"Reservations still reserved although their lease is over (the sweep is behind or failing).", nil, nil)
	gaps := prometheus.NewDesc("inventory_event_gaps",
		"Event gaps not resolved yet: open (within the deadline) or overdue (past it).", []string{"state"}, nil)
	read := func(ctx context.Context) ([]prometheus.Metric, error) {
		n, err := inventorydb.ReadCounts(ctx, a.db)
		if err != nil {
			return nil, err
		}
		return []prometheus.Metric{
			prometheus.MustNewConstMetric(expired, prometheus.CounterValue, float64(n.Expired)),
			prometheus.MustNewConstMetric(commitFailed, prometheus.CounterValue, float64(n.CommitFailed)),
			prometheus.MustNewConstMetric(rejected, prometheus.CounterValue, float64(n.Rejected)),
			prometheus.MustNewConstMetric(pastLease, prometheus.GaugeValue, float64(n.PastLease)),
			prometheus.MustNewConstMetric(gaps, prometheus.GaugeValue, float64(n.GapsOpen), "open"),
			prometheus.MustNewConstMetric(gaps, prometheus.GaugeValue, float64(n.GapsOverdue), "overdue"),
		}, nil
	}
	return scrape.Collector(a.log, "read inventory counts", read, expired, commitFailed, rejected, pastLease, gaps)
}
