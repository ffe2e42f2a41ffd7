package paymentapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/inbox/batch"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentdb"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp"
)

// Charges and refunds call the PSP by one rule, the chapter's (有限重试与死信):
//
//	外部调用超时、结果未知 -> 先用业务键查询状态，再决定是否重试
//
// An external call that timed out has an unknown outcome: first query its
// status by the business key, then decide whether to retry. The business
// key is the idempotency key the call was made with; the PSP answers a
// status query by it and never charges or refunds twice for it.

// requestLog is the logger of an event that asks for a call to the PSP (a
// charge or a refund): the order, the event, the idempotency key and, on a
// new request for the same call (the sweep's or an operator's: a new
// event, so the inbox lets it through; the key keeps the PSP to one charge
// or refund), the event it corrects.
func (a *App) requestLog(e events.Envelope, orderID uint64, key string) *slog.Logger {
	log := a.log.With("order_id", orderID, "event_id", e.EventID, "event_type", e.Type, "idempotency_key", key)
	if e.CorrectsEventID != "" {
		log = log.With("corrects_event_id", e.CorrectsEventID)
	}
	return log
}

// readRequested reads the row (the payment of a charge, or a refund) that
// an event asks the PSP about, with get, a plain read: nothing is locked
// while the PSP is called, and the record step locks the row and checks
// it again. No row (absent) is permanent: the event asks for a call
// (charge, refund) of a row this service never wrote.
func readRequested[T any](ctx context.Context, db sqlx.QueryerContext, get func(context.Context, sqlx.QueryerContext, uint64) (T, error),
	absent error, call, row string, orderID uint64) (T, error) {
	v, err := get(ctx, db, orderID)
	if errors.Is(err, absent) {
		return v, inbox.Permanent(fmt.Errorf("%s requested for order %d, which has no %s", call, orderID, row))
	}
	return v, err
}

// recordStep is how ChargeAtPSP and RefundAtPSP end once the PSP has
// answered v: the failpoint of the window where the PSP has decided and we
// have not recorded it (whatever happens there, the message comes back and
// the same key gets the same answer), then the Handler that records v in
// the inbox transaction with record (recordCharge, recordRefund).
func recordStep[T any](ctx context.Context, failpointName string, log *slog.Logger, orderID uint64, v T,
	record func(context.Context, Store, *slog.Logger, uint64, T) error) (batch.Handler[Store], error) {
	if err := failpoint.Inject(ctx, failpointName); err != nil {
		return nil, err
	}
	return func(ctx context.Context, s Store, _ events.Envelope) error {
		return record(ctx, s, s.Log(log), orderID, v)
	}, nil
}

// keyedCall is one call to the PSP, a charge or a refund, and the status
// query that goes with it. chargeCall and refundCall build them.
type keyedCall[T any] struct {
	what       string // "charge" or "refund", in logs and errors
	callLabel  string // the call label of payment_psp_calls_total for the call,
	queryLabel string // and for the status query
	key        string // the idempotency key: the business key of the query

	call  func(context.Context) (T, error) // the call, once
	query func(context.Context) (T, error) // the status query by key
	check func(T) (T, error)               // is the record the one asked for, with an outcome we understand
	found func(T) []any                    // what the log says of a record the query found

	absent     error // wrapped when the PSP has no record with the key
	unresolved error // wrapped when the outcome stays unknown: transient

	metrics *metrics
}

// refusal is a 4xx answer to the call: the PSP understood and refused
// (bad request, key reused with other parameters, nothing to refund).
// Nothing was done, and the same call gets the same answer: retrying
// cannot help.
type refusal struct {
	what string
	err  error
}

func (r *refusal) Error() string { return fmt.Sprintf("PSP refused the %s: %v", r.what, r.err) }
func (r *refusal) Unwrap() error { return r.err }

// do makes the call once and, if its answer is lost, queries the status by
// the same key. It returns the PSP's record, checked, or an error:
//   - the unresolved error: the outcome is still unknown (the query found
//     nothing, or failed). Transient: calling again with the same key is
//     safe, and it is how the consumer and the sweep go on;
//   - a *refusal, marked inbox.Permanent;
//   - another error: transient.
func (k keyedCall[T]) do(ctx context.Context, log *slog.Logger) (T, error) {
	var zero T
	v, err := k.call(ctx)
	k.metrics.observe(k.callLabel, err)
	var refused *psp.APIError
	switch {
	case err == nil:
		return k.check(v)

	case errors.Is(err, psp.ErrOutcomeUnknown):
		// Maybe done, maybe not: never read this as a decline. Ask.
		log.WarnContext(ctx, "PSP "+k.what+" outcome unknown; querying its status with the same key", "err", err)
		v, err := k.status(ctx, err)
		if errors.Is(err, k.absent) {
			// Not done yet, not "never will be": the lost request may
			// still arrive. Calling again with the same key is safe.
			return zero, fmt.Errorf("%w: %w", k.unresolved, err)
		}
		if err == nil {
			log.InfoContext(ctx, "status query found the "+k.what, k.found(v)...)
		}
		return v, err

	case errors.As(err, &refused):
		return zero, inbox.Permanent(&refusal{what: k.what, err: err})

	default:
		return zero, fmt.Errorf("psp %s: %w", k.what, err)
	}
}

// status asks the PSP for the record made with the key (a query never
// charges or refunds). It returns the checked record, an error wrapping
// the absent error when the PSP has none, or the unresolved error when the
// query failed. callErr is the call's own error, kept as evidence; nil when
// there was no call (the sweep, a cancelled order).
func (k keyedCall[T]) status(ctx context.Context, callErr error) (T, error) {
	var zero T
	v, err := k.query(ctx)
	k.metrics.observe(k.queryLabel, err)
	prefix := ""
	if callErr != nil {
		prefix = fmt.Sprintf("%s call: %v; ", k.what, callErr)
	}
	switch {
	case err == nil:
		return k.check(v)
	case errors.Is(err, psp.ErrNotFound):
		return zero, fmt.Errorf("%s%w (key %s)", prefix, k.absent, k.key)
	default:
		return zero, fmt.Errorf("%w: %sstatus query: %w", k.unresolved, prefix, err)
	}
}

// noteFailure keeps an attempt that did not settle the outcome as evidence
// on the charge's or the refund's row (attempts, last_error). Best effort:
// the attempt fails either way.
func (a *App) noteFailure(ctx context.Context, log *slog.Logger, step paymentdb.Step, orderID uint64, cause error) {
	if err := step.NoteFailure(ctx, a.db, orderID, cause.Error()); err != nil {
		log.WarnContext(ctx, "could not note the failed attempt", "err", err)
	}
}
