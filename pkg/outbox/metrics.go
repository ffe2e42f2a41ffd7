package outbox

import (
	"context"
	"log/slog"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/pkg/base/scrape"
)

type metrics struct {
	publish      *prometheus.CounterVec
	failed       prometheus.Counter
	recovered    prometheus.Counter
	resends      prometheus.Counter
	claimsLost   prometheus.Counter
	renewals     prometheus.Counter
	claims       *prometheus.CounterVec
	batchSeconds prometheus.Histogram
}

func newMetrics(db *sqlx.DB, reg prometheus.Registerer, log *slog.Logger) *metrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	byResult := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"result"})
	}
	m := &metrics{
		publish: byResult("outbox_publish_total",
			"Outbox messages published, by outcome: confirmed, returned (unroutable), nacked, timeout (no confirm), error."),
		failed: counter("outbox_marked_failed_total",
			"Outbox events that used up their attempts and became 'failed' (needs an operator)."),
		recovered: counter("outbox_leases_recovered_total",
			"Rows whose claim lease expired and were handed back for re-sending."),
		resends: counter("outbox_resends_total",
			"Publishes of events that had been attempted before (after a lost confirm, a return, a nack or an expired lease)."),
		claimsLost: counter("outbox_claims_lost_total",
			"Rows that were no longer ours when we came to mark them (the claim-token check held)."),
		renewals: counter("outbox_lease_renewals_total", "Lease renewals during slow publishes."),
		claims: byResult("outbox_claims_total",
			"Claim transactions, by whether they found due rows (rows) or came back empty (empty): a high empty share is wasted database round trips."),
		batchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outbox_batch_duration_seconds",
			Help:    "Time from claim to marks of one batch.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
	}
	for _, r := range []string{"confirmed", "returned", "nacked", "timeout", "error"} {
		m.publish.WithLabelValues(r)
	}
	m.claims.WithLabelValues("rows")
	m.claims.WithLabelValues("empty")
	if reg != nil {
		reg.MustRegister(m.publish, m.failed, m.recovered, m.resends, m.claimsLost, m.renewals, m.claims, m.batchSeconds,
			tableCollector(db, log))
	}
	return m
}

var (
	rowsDesc = prometheus.NewDesc("outbox_events", "Outbox rows by status (pending, sending, failed).",
		[]string{"status"}, nil)
	oldestDesc = prometheus.NewDesc("outbox_oldest_pending_age_seconds",
		"Age of the oldest pending outbox event (0 when none).", nil, nil)
)

// tableCollector reads the outbox table at scrape time (scrape.Collector):
// rows by status (excluding 'sent', which only grows) and the age of the
// oldest pending event, the chapter's first alarm ("is sending stalled?").
func tableCollector(db *sqlx.DB, log *slog.Logger) prometheus.Collector {
	read := func(ctx context.Context) ([]prometheus.Metric, error) {
		counted := []string{StatusPending, StatusSending, StatusFailed}
		counts, err := countByStatus(ctx, db, counted...)
		if err != nil {
			return nil, err
		}
		age, err := oldestPendingAge(ctx, db)
		if err != nil {
			return nil, err
		}
		var ms []prometheus.Metric
		for _, s := range counted {
			ms = append(ms, prometheus.MustNewConstMetric(rowsDesc, prometheus.GaugeValue, float64(counts[s]), s))
		}
		return append(ms, prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age.Seconds())), nil
	}
	return scrape.Collector(log, "read the outbox table", read, rowsDesc, oldestDesc)
}
