package orderapp

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/pkg/base/scrape"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
)

// The order service's own metrics (the outbox and inbox ones come from
// pkg/outbox and pkg/inbox):
//
//	order_deadlines_expired_total{status}                orders the deadline sweep cancelled, by the state they waited in
//	reconciliation_differences_total{classification}     findings of the reconciler that are differences between the services' records
//	reconciliation_repairs_total{action,outcome}         what the reconciler did about them and how it ended
//	reconciliation_runs_total{trigger}                   reconciliation passes (schedule, admin)
//	order_lease_lost_total{job}                          runs of the reconciler or the deadline sweep stopped because their database lease was lost
//	orders_oldest_open_age_seconds{status}               age of the oldest order still in pending_inventory / awaiting_payment (scrape time)
//	orders_past_deadline                                 open orders whose deadline passed and that are not cancelled yet (scrape time)
//
// Counters count what this instance did (sum them across instances); the
// two gauges are read from the table at scrape time, so every instance
// reports the same value (aggregate with max()).
type metrics struct {
	deadlinesExpired *prometheus.CounterVec
	deadlineChecks   *prometheus.CounterVec
	differences      *prometheus.CounterVec
	repairs          *prometheus.CounterVec
	runs             *prometheus.CounterVec
	leaseLost        *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		deadlinesExpired: counterVec("order_deadlines_expired_total",
			"Orders cancelled by the deadline sweep, by the state whose deadline passed.",
			"status"),
		deadlineChecks: counterVec("order_payment_deadline_checks_total",
			"Orders whose payment deadline passed, by what payment said of the charge (succeeded, declined, refunded, not_charged, unknown, no_payment, not_asked) and what the sweep did (cancel, wait).",
			"outcome", "decision"),
		differences: counterVec("reconciliation_differences_total",
			"Orders the reconciler found whose records differ between the services, by classification.",
			"classification"),
		repairs: counterVec("reconciliation_repairs_total",
			"Repairs (and reports) of the reconciler, by action and outcome.",
			"action", "outcome"),
		runs: counterVec("reconciliation_runs_total",
			"Reconciliation passes, by what started them (schedule, admin).",
			"trigger"),
		leaseLost: counterVec("order_lease_lost_total",
			"Runs of a one-at-a-time job (reconciler, deadline-sweep) stopped before their next change because their database lease was lost (their session ended; another run may hold it).",
			"job"),
	}
	// Every series exists from the start, at 0, so rate() and alerts see
	// the first increment.
	for _, s := range []order.Status{order.PendingInventory, order.AwaitingPayment} {
		m.deadlinesExpired.WithLabelValues(string(s))
	}
	for _, o := range order.Outcomes {
		for _, giveUp := range []bool{false, true} {
			m.deadlineChecks.WithLabelValues(o, string(order.AtPaymentDeadline(o, giveUp).Action))
		}
	}
	for _, c := range order.Classifications {
		if c.Difference() {
			m.differences.WithLabelValues(string(c))
		}
	}
	for _, a := range []order.RepairAction{order.RepublishEvent, order.ResendEvent, order.CorrectEvent, order.ApplyResult, order.RepublishParticipantEvent} {
		for _, o := range []string{OutcomeRepaired, OutcomeStateChanged, OutcomeFailed} {
			m.repairs.WithLabelValues(string(a), o)
		}
	}
	m.repairs.WithLabelValues(string(order.Report), OutcomeReported)
	m.runs.WithLabelValues("schedule")
	m.runs.WithLabelValues("admin")
	m.leaseLost.WithLabelValues(ReconcilerLease)
	m.leaseLost.WithLabelValues(DeadlineSweepLease)
	if reg != nil {
		reg.MustRegister(m.deadlinesExpired, m.deadlineChecks, m.differences, m.repairs, m.runs, m.leaseLost)
	}
	return m
}

// counterVec is a counter with labels: its name, help and label names.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// Collector returns the scrape-time gauges (scrape.Collector):
// orders_oldest_open_age_seconds and orders_past_deadline, read from the
// orders table, and reconciliation_needs_attention, from
// reconciliation_checks.
func (a *App) Collector() prometheus.Collector {
	oldest := prometheus.NewDesc("orders_oldest_open_age_seconds",
		"Age of the oldest order still in this non-terminal state (0: none). Grows when the saga is stuck, even with empty queues.",
		[]string{"status"}, nil)
	pastDeadline := prometheus.NewDesc("orders_past_deadline",
		"Open orders whose deadline passed and that the sweep has not cancelled yet (the sweep is behind or failing).",
		nil, nil)
	needsAttention := prometheus.NewDesc("reconciliation_needs_attention",
		"Finished orders the reconciler found differing from a participant's records and could not repair: parked for an operator (reconciliation_checks).",
		nil, nil)
	read := func(ctx context.Context) ([]prometheus.Metric, error) {
		g, err := orderdb.ReadGauges(ctx, a.db)
		if err != nil {
			return nil, err
		}
		var ms []prometheus.Metric
		for _, s := range []order.Status{order.PendingInventory, order.AwaitingPayment} {
			ms = append(ms, prometheus.MustNewConstMetric(oldest, prometheus.GaugeValue, g.OldestOpen[s], string(s)))
		}
		return append(ms,
			prometheus.MustNewConstMetric(pastDeadline, prometheus.GaugeValue, float64(g.PastDeadline)),
			prometheus.MustNewConstMetric(needsAttention, prometheus.GaugeValue, float64(g.NeedsAttention))), nil
	}
	return scrape.Collector(a.log, "read order gauges", read, oldest, pastDeadline, needsAttention)
}
