// Package paymentapp holds the payment service's use cases. Each database
// change is exactly one local transaction (the inbox transaction of the
// consumer that runs it, or the sweep's own): the payment change and the
// events it emits (outbox rows) commit together or not at all.
//
// The charge itself is the one step that cannot be part of a transaction:
// the PSP is another company. So the charge is split in two, each step
// driven by a message:
//
//  1. inventory.reserved -> OnInventoryReserved (consumer "payment"): one
//     transaction writes the pending payment, with its idempotency key and
//     its deadline, and the payment.charge-requested event into the outbox.
//     Nothing external happens yet, so nothing can be half done.
//  2. payment.charge-requested -> ChargeAtPSP (consumer "payment-psp", an
//     inbox.ExternalHandler): call the PSP with no transaction open, then
//     record the outcome (pending -> succeeded/failed plus the result event)
//     in the inbox transaction.
//
// A crash or error anywhere in step 2 leaves the message unacknowledged or
// scheduled for retry; the retry calls the PSP again with the same key, and
// the PSP answers with the charge it already made instead of charging again.
// An unknown outcome (timeout, lost answer, 5xx) is never read as a decline:
// a status query with the same key decides, and "not found" only means
// "try again later".
//
// The refund of a cancelled order is the same two steps (refund.go):
// order.cancelled (or a charge that succeeds after the cancel) writes the
// refund row and payment.refund-requested; consumer "payment-refunds" calls
// the PSP's refund with the key "refund-<order_id>".
//
// The consumers' retries are bounded (pkg/inbox dead-letters a message
// after its attempts), so they are not what guarantees an outcome. The
// sweep is (sweep.go): a loop over the tables that re-queries the PSP for
// every payment and refund still open after a grace period, re-requests
// the step with backoff when the PSP has no record, and parks it as
// needs_attention, with the evidence, when its business deadline passes.
// Everything it needs is in the rows, so a restart resumes where the last
// process stopped.
package paymentapp

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/base/scrape"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentdb"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp"
)

// Failpoints of the PSP calls.
const (
	// FailpointAfterPSPCall is the window between the PSP's answer and the
	// commit that records it: an error (or a crash) here rolls the inbox
	// claim back, so the message is retried and the PSP is called again.
	// The same idempotency key makes that second call return the first
	// charge.
	FailpointAfterPSPCall = "payment.charge.after-psp-before-record"
	// FailpointAfterPSPRefund is the same window for a refund.
	FailpointAfterPSPRefund = "payment.refund.after-psp-before-record"
	// FailpointBeforeSend: the charge consumer read a pending payment and
	// has not marked its charge sent: a cancel now withdraws the payment,
	// and the charge is never sent.
	FailpointBeforeSend = "payment.charge.before-send"
)

func init() {
	failpoint.Register(FailpointAfterPSPCall,
		"PSP answered, outcome not recorded yet: the retry calls the PSP again with the same key and must not charge twice")
	failpoint.Register(FailpointBeforeSend,
		"charge request read, charge not sent to the PSP yet: a cancel now withdraws the payment and nothing is sent")
	failpoint.Register(FailpointAfterPSPRefund,
		"PSP refunded, refund not recorded yet: the retry (or the sweep's status query) must not refund twice")
}

// Config is the payment service's business timing. Zero fields take the
// defaults in brackets.
type Config struct {
	// ChargeDeadline bounds how long a charge's outcome may stay unknown:
	// set on the payment when it is created; past it the sweep parks the
	// payment as needs_attention [10m] (PAYMENT_DEADLINE).
	ChargeDeadline time.Duration
	// RefundDeadline bounds how long a refund is retried before it is
	// parked as needs_attention [30m] (REFUND_DEADLINE).
	RefundDeadline time.Duration
	// Grace is how long after a request the sweep leaves it to the
	// consumer before its first look [30s] (PAYMENT_SWEEP_GRACE).
	Grace time.Duration
	// CancelSettle is the in-flight window of a charge: how long after its
	// last send to the PSP a cancelled order's payment is settled by a
	// status query, and closed as cancelled_before_charge if the PSP has
	// no charge then [15s] (PAYMENT_CANCEL_SETTLE; at least twice
	// PSP_TIMEOUT, a charge and its status query).
	CancelSettle time.Duration
	// Backoff spaces the sweep's rounds on one row [30s .. 5m]
	// (PAYMENT_RETRY_BASE, PAYMENT_RETRY_CAP).
	Backoff retry.Backoff
	// SweepBatch bounds the payments, and the refunds, one sweep round
	// claims [20] (PAYMENT_SWEEP_BATCH).
	SweepBatch int
	// Wake is called after the sweep or an operator wrote outbox events
	// (the dispatcher's Wake); nil: the dispatcher's poll finds them.
	Wake func()
}

func (c Config) withDefaults() Config {
	if c.ChargeDeadline <= 0 {
		c.ChargeDeadline = 10 * time.Minute
	}
	if c.RefundDeadline <= 0 {
		c.RefundDeadline = 30 * time.Minute
	}
	if c.Grace <= 0 {
		c.Grace = 30 * time.Second
	}
	if c.CancelSettle <= 0 {
		c.CancelSettle = 15 * time.Second
	}
	if c.Backoff.Base <= 0 {
		c.Backoff.Base = 30 * time.Second
	}
	if c.Backoff.Cap <= 0 {
		c.Backoff.Cap = 5 * time.Minute
	}
	if c.SweepBatch <= 0 {
		c.SweepBatch = 20
	}
	if c.Wake == nil {
		c.Wake = func() {}
	}
	return c
}

// App is the payment service's application layer.
type App struct {
	db      *sqlx.DB
	psp     *psp.Client
	log     *slog.Logger
	metrics *metrics
	cfg     Config
}

// New returns the app. It reaches the PSP only through pspClient (over
// HTTP, whose timeout bounds each call). Its metrics are registered on reg
// (nil: not exported).
func New(db *sqlx.DB, pspClient *psp.Client, log *slog.Logger, reg prometheus.Registerer, cfg Config) *App {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &App{db: db, psp: pspClient, log: log, metrics: newMetrics(db, reg, log), cfg: cfg.withDefaults()}
}

// txRetry is how the payment service's own transactions (the sweep's, an
// operator's retry) are retried (sqldb.WithTxRetry): after a transient
// failure before COMMIT always, after a COMMIT whose outcome is unknown
// only when a second run changes nothing (idempotent: a claim, a recorded
// outcome, a park, each a compare-and-set). The consumers' transactions
// are retried through the broker (pkg/inbox).
func (a *App) txRetry(idempotent bool) sqldb.TxRetry {
	return sqldb.TxRetry{Idempotent: idempotent, Log: a.log}
}

// Get returns an order's payment, or payment.ErrNotFound.
func (a *App) Get(ctx context.Context, orderID uint64) (payment.Payment, error) {
	return paymentdb.Get(ctx, a.db, orderID)
}

// Refund returns an order's refund and whether it has one.
func (a *App) Refund(ctx context.Context, orderID uint64) (payment.Refund, bool, error) {
	f, err := paymentdb.GetRefund(ctx, a.db, orderID)
	if errors.Is(err, paymentdb.ErrNoRefund) {
		return payment.Refund{}, false, nil
	}
	return f, err == nil, err
}

// metrics: the PSP calls by what came back, the compensations, and (read
// from the tables at scrape time) what is parked.
type metrics struct {
	pspCalls             *prometheus.CounterVec
	compensationFailures prometheus.Counter
	refunds              *prometheus.CounterVec
	sweep                *prometheus.CounterVec
}

// PSP call results, the "result" label of payment_psp_calls_total.
const (
	resultOK       = "ok"              // a charge or refund record came back
	resultUnknown  = "outcome_unknown" // timeout, dropped connection, 5xx
	resultNotFound = "not_found"       // status query: the PSP has no record with this key
	resultRefused  = "refused"         // 4xx: the PSP refused the call
	resultError    = "error"           // anything else (the request could not be built)
)

// Refund results, the "result" label of payment_refunds_total.
const (
	refundRequested      = "requested"
	refundSucceeded      = "succeeded"
	refundNeedsAttention = "needs_attention"
)

func newMetrics(db *sqlx.DB, reg prometheus.Registerer, log *slog.Logger) *metrics {
	m := &metrics{
		pspCalls: counterVec("payment_psp_calls_total",
			"Calls to the PSP by call (charge, status, refund, refund_status) and result (ok, outcome_unknown, not_found, refused, error).",
			"call", "result"),
		compensationFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "payment_compensation_failures_total",
			Help: "Refund attempts that failed: the PSP refused, or the outcome stayed unknown after the status query.",
		}),
		refunds: counterVec("payment_refunds_total",
			"Refunds by result: requested, succeeded, needs_attention (parked for an operator).",
			"result"),
		sweep: counterVec("payment_sweep_actions_total",
			"What the sweep did with the rows it claimed, by kind (charge, refund) and action (resolved, rerequested, parked, voided, waiting, error).",
			"kind", "action"),
	}
	// Export every series at zero from the start: alerts and dashboards see
	// a zero, not an absent series, before the first failure.
	for _, r := range []string{refundRequested, refundSucceeded, refundNeedsAttention} {
		m.refunds.WithLabelValues(r)
	}
	for _, call := range []string{"charge", "status", "refund", "refund_status"} {
		for _, r := range []string{resultOK, resultUnknown, resultNotFound, resultRefused, resultError} {
			m.pspCalls.WithLabelValues(call, r)
		}
	}
	for _, kind := range []string{"charge", "refund"} {
		for _, a := range []string{actResolved, actRerequested, actParked, actVoided, actWaiting, actError} {
			m.sweep.WithLabelValues(kind, a)
		}
	}
	if reg != nil {
		reg.MustRegister(m.pspCalls, m.compensationFailures, m.refunds, m.sweep, parkedCollector(db, log))
	}
	return m
}

// counterVec is a counter with labels: its name, help and label names.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// observe counts one PSP call by its result.
func (m *metrics) observe(call string, err error) {
	var refused *psp.APIError
	result := resultOK
	switch {
	case err == nil:
	case errors.Is(err, psp.ErrOutcomeUnknown):
		result = resultUnknown
	case errors.Is(err, psp.ErrNotFound):
		result = resultNotFound
	case errors.As(err, &refused):
		result = resultRefused
	default:
		result = resultError
	}
	m.pspCalls.WithLabelValues(call, result).Inc()
}

var parkedDesc = prometheus.NewDesc("payment_needs_attention",
	"Rows parked as needs_attention, waiting for an operator, by kind: charge (outcome unknown at the deadline) or refund (compensation failed until its deadline).",
	[]string{"kind"}, nil)

// paymentsDesc counts payments by status; "failed" are the PSP's declines,
// the payment step's business rejections.
var paymentsDesc = prometheus.NewDesc("payment_payments",
	"Payments by status (pending, succeeded, failed = declined by the PSP, refunded, needs_attention, cancelled_before_charge, withdrawn).",
	[]string{"status"}, nil)

// parkedCollector reads the parked rows and the payments by status at
// scrape time (scrape.Collector), so the gauges are right after a restart
// and whichever instance parked the rows.
func parkedCollector(db *sqlx.DB, log *slog.Logger) prometheus.Collector {
	read := func(ctx context.Context) ([]prometheus.Metric, error) {
		charges, refunds, err := paymentdb.CountParked(ctx, db)
		if err != nil {
			return nil, err
		}
		const q = `SELECT status, COUNT(*) AS n FROM payments GROUP BY status`
		var rows []struct {
			Status string `db:"status"`
			N      int64  `db:"n"`
		}
		if err := sqlx.SelectContext(ctx, db, &rows, q); err != nil {
			return nil, err
		}
		counts := map[string]int64{}
		for _, st := range payment.Statuses {
			counts[string(st)] = 0
		}
		for _, r := range rows {
			counts[r.Status] = r.N
		}
		ms := []prometheus.Metric{
			prometheus.MustNewConstMetric(parkedDesc, prometheus.GaugeValue, float64(charges), "charge"),
			prometheus.MustNewConstMetric(parkedDesc, prometheus.GaugeValue, float64(refunds), "refund"),
		}
		for st, n := range counts {
			ms = append(ms, prometheus.MustNewConstMetric(paymentsDesc, prometheus.GaugeValue, float64(n), st))
		}
		return ms, nil
	}
	return scrape.Collector(log, "read payment gauges", read, parkedDesc, paymentsDesc)
}
