// Package paymentapp holds the payment service's use cases. Each database
// change is exactly one local transaction (the inbox transaction of the
// consumer that runs it): the payment change and the events it emits
// (outbox rows) commit together or not at all.
//
// The charge itself is the one step that cannot be part of a transaction:
// the PSP is another company. So the charge is split in two, each step
// driven by a message:
//
//  1. inventory.reserved -> OnInventoryReserved (consumer "payment"): one
//     transaction writes the pending payment, with its idempotency key, and
//     the payment.charge-requested event into the outbox. Nothing external
//     happens yet, so nothing can be half done.
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
package paymentapp

import (
	"context"
	"errors"
	"log/slog"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/pkg/failpoint"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentdb"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp"
)

// FailpointAfterPSPCall is the window between the PSP's answer and the
// commit that records it: an error (or a crash) here rolls the inbox claim
// back, so the message is retried and the PSP is called again. The same
// idempotency key makes that second call return the first charge.
const FailpointAfterPSPCall = "payment.charge.after-psp-before-record"

func init() {
	failpoint.Register(FailpointAfterPSPCall,
		"PSP answered, outcome not recorded yet: the retry calls the PSP again with the same key and must not charge twice")
}

// App is the payment service's application layer.
type App struct {
	db      *sqlx.DB
	psp     *psp.Client
	log     *slog.Logger
	metrics *metrics
}

// New returns the app. It reaches the PSP only through pspClient (over
// HTTP, whose timeout bounds each call). The PSP call metrics are
// registered on reg (nil: not exported).
func New(db *sqlx.DB, pspClient *psp.Client, log *slog.Logger, reg prometheus.Registerer) *App {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &App{db: db, psp: pspClient, log: log, metrics: newMetrics(reg)}
}

// Get returns an order's payment, or payment.ErrNotFound.
func (a *App) Get(ctx context.Context, orderID uint64) (payment.Payment, error) {
	return paymentdb.Get(ctx, a.db, orderID)
}

// metrics counts the PSP calls by what came back, so a dashboard shows the
// unknown outcomes and how they were resolved.
type metrics struct {
	pspCalls *prometheus.CounterVec
}

// PSP call results, the "result" label of payment_psp_calls_total.
const (
	resultOK       = "ok"              // a charge record came back
	resultUnknown  = "outcome_unknown" // timeout, dropped connection, 5xx
	resultNotFound = "not_found"       // status query: the PSP has no charge with this key
	resultRefused  = "refused"         // 4xx: the PSP refused the call
	resultError    = "error"           // anything else (the request could not be built)
)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{pspCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "payment_psp_calls_total",
		Help: "Calls to the PSP by call (charge, status) and result (ok, outcome_unknown, not_found, refused, error).",
	}, []string{"call", "result"})}
	if reg != nil {
		reg.MustRegister(m.pspCalls)
	}
	return m
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
