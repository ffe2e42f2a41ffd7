package inventoryapp

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/services/inventory/internal/inventorydb"
)

// Collector returns the inventory metrics. They are read from the tables
// at scrape time (one statement), not counted in memory: the numbers are
// the persisted truth, survive restarts, and include what other instances
// did. So every instance reports the same values: aggregate across
// instances with max(), not sum().
//
//	inventory_reservations_expired_total      reservations whose lease ran out (expired_at set)
//	inventory_commit_failed_total             late confirms that found the stock gone (status commit_failed)
//	inventory_reservations_rejected_total     business rejections (not enough stock, unknown SKU)
//	inventory_reservations_past_lease         still reserved although the lease is over: the sweep is behind or failing
//	inventory_event_gaps{state="open"}        gaps not resolved yet, within their deadline
//	inventory_event_gaps{state="overdue"}     gaps not resolved past their deadline: alert on > 0
func (a *App) Collector() prometheus.Collector {
	return &collector{app: a,
		expired: prometheus.NewDesc("inventory_reservations_expired_total",
			"Reservations whose lease ran out and whose stock the sweep released.", nil, nil),
		commitFailed: prometheus.NewDesc("inventory_commit_failed_total",
			"Orders confirmed after their reservation expired whose stock was gone (commit_failed).", nil, nil),
		rejected: prometheus.NewDesc("inventory_reservations_rejected_total",
			"Reservations rejected as a business outcome (not enough stock, unknown SKU): results, not failures.", nil, nil),
		pastLease: prometheus.NewDesc("inventory_reservations_past_lease",
			"Reservations still reserved although their lease is over (the sweep is behind or failing).", nil, nil),
		gaps: prometheus.NewDesc("inventory_event_gaps",
			"Event gaps not resolved yet: open (within the deadline) or overdue (past it).", []string{"state"}, nil),
	}
}

type collector struct {
	app                                              *App
	expired, commitFailed, rejected, pastLease, gaps *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.expired
	ch <- c.commitFailed
	ch <- c.rejected
	ch <- c.pastLease
	ch <- c.gaps
}

// scrapeTimeout bounds the query of one scrape.
const scrapeTimeout = 5 * time.Second

// Collect reads the counts. If the database does not answer, these metrics
// are left out of the scrape (and the failure logged) rather than failing
// the whole scrape: the missing series is the signal.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	n, err := inventorydb.ReadCounts(ctx, c.app.db)
	if err != nil {
		c.app.log.Warn("metrics: read inventory counts", "err", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.expired, prometheus.CounterValue, float64(n.Expired))
	ch <- prometheus.MustNewConstMetric(c.commitFailed, prometheus.CounterValue, float64(n.CommitFailed))
	ch <- prometheus.MustNewConstMetric(c.rejected, prometheus.CounterValue, float64(n.Rejected))
	ch <- prometheus.MustNewConstMetric(c.pastLease, prometheus.GaugeValue, float64(n.PastLease))
	ch <- prometheus.MustNewConstMetric(c.gaps, prometheus.GaugeValue, float64(n.GapsOpen), "open")
	ch <- prometheus.MustNewConstMetric(c.gaps, prometheus.GaugeValue, float64(n.GapsOverdue), "overdue")
}
