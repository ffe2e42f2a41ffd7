package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/jmoiron/sqlx"
	"go.opentelemetry.io/otel/attribute"

	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/tracing"
	"github.com/relmsg/ordersaga/pkg/deadletter"
	"github.com/relmsg/ordersaga/pkg/ordering"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// Handle is the rabbit.Handler of this consumer: validate, process, and turn
// the outcome into ack, delayed retry or dead letter. ACK only after COMMIT.
func (c *Consumer) Handle(ctx context.Context, d rabbit.Delivery) rabbit.Decision {
	c.Arrived(d)
	return c.HandleArrived(ctx, d)
}

// Arrived counts a delivery as it arrives. Handle does it; a layer that
// takes deliveries in before it knows how it will process them (the batch
// layer, pkg/inbox/batch) calls it once per delivery, then HandleArrived
// for those it sends down the chapter's path.
func (c *Consumer) Arrived(d rabbit.Delivery) {
	c.cfg.Metrics.deliveries.WithLabelValues(c.cfg.Name).Inc()
	if d.Redelivered {
		c.cfg.Metrics.redeliveries.WithLabelValues(c.cfg.Name).Inc()
	}
}

// HandleArrived is the chapter's path for one delivery already counted: its
// own transaction, and its decision. A panic in the handler (or below it)
// rolls the transaction back (sqldb.WithTx) and becomes a failed attempt
// like any other: retried with backoff, a dead letter past the budget,
// never a process exit.
func (c *Consumer) HandleArrived(ctx context.Context, d rabbit.Delivery) rabbit.Decision {
	return c.handle(ctx, d, c.commit)
}

// handle is HandleArrived with the transaction step given: the chapter's
// (commit), or one of the wrong ways of wrongway.go.
func (c *Consumer) handle(ctx context.Context, d rabbit.Delivery, step commitStep) (dec rabbit.Decision) {
	// The delivery's process span continues the producer's trace: this
	// handler's logs and the events it writes carry its trace_id.
	ctx, span := c.StartProcess(ctx, d)
	defer span.End()
	e, err := d.Envelope() // validate the structure
	defer func() {
		if p := recover(); p != nil {
			c.cfg.Log.Error("handler panicked; the attempt is rolled back and decided like a failure",
				"consumer", c.cfg.Name, "event_id", d.MessageId, "panic", p, "stack", string(debug.Stack()))
			dec = c.Decide(ctx, d, fmt.Errorf("%w: %v", ErrPanic, p))
		}
	}()
	if err == nil {
		err = c.process(ctx, e, d.KnownSince(), step)
	}
	return c.Decide(ctx, d, err)
}

// ErrPanic wraps what a handler panicked with: a failed attempt, retried
// and in the end dead-lettered, not a crash of the consumer.
var ErrPanic = errors.New("handler panicked")

// Decide turns the outcome of processing d (err; nil: committed) into ack,
// delayed retry or dead letter, with its log line and counters. The batch
// layer decides its committed events and its failed external calls here
// too, so every delivery is decided by the same rules.
func (c *Consumer) Decide(ctx context.Context, d rabbit.Delivery, err error) rabbit.Decision {
	e, _ := d.Envelope()
	log := c.cfg.Log.With("consumer", c.cfg.Name, "event_id", d.MessageId, "event_type", d.Type,
		"order_id", e.AggregateID, "attempt", d.Attempt, "trace_id", tracing.TraceID(ctx))
	dec := c.decision(ctx, log, d, e, err)
	traceDecision(ctx, d, err, dec)
	return dec
}

// decision turns the outcome of processing d (err, nil for committed) into
// ack, delayed retry or dead letter.
func (c *Consumer) decision(ctx context.Context, log *slog.Logger, d rabbit.Delivery, e events.Envelope, err error) rabbit.Decision {
	m := c.cfg.Metrics
	switch {
	case err == nil:
		m.processed.WithLabelValues(c.cfg.Name).Inc()
		log.Debug("event processed")
		// Window: committed, not acked. A crash here redelivers the
		// message; the inbox row turns the redelivery into a duplicate.
		if err := failpoint.Inject(ctx, "inbox.after-commit-before-ack"); err != nil {
			return rabbit.Abandon(err.Error())
		}
		return rabbit.Ack()
	case errors.Is(err, ErrAlreadyProcessed):
		m.duplicates.WithLabelValues(c.cfg.Name).Inc()
		log.Info("duplicate delivery suppressed by the inbox")
		return rabbit.Ack()
	case errors.Is(err, ordering.ErrParked):
		log.Warn("delta event parked until the earlier versions of its aggregate arrive", "version", e.AggregateVersion)
		return rabbit.Ack()
	case errors.Is(err, ErrPayloadMismatch):
		m.payloadMismatch.WithLabelValues(c.cfg.Name).Inc()
		log.Error("ALERT: an event_id this consumer already processed arrived with a different payload; not applied",
			"payload_sha256", PayloadHash(d.Body))
		return c.deadLetter(ctx, log, d, ErrPayloadMismatch.Error()+
			": this consumer already processed the event_id with another payload; nothing applied, find out which one is right")
	case isPermanent(err):
		return c.deadLetter(ctx, log, d, err.Error())
	}
	if age := d.FailingFor(); d.Attempt >= c.cfg.MaxAttempts || age > c.cfg.MaxRetryAge {
		return c.deadLetter(ctx, log, d, fmt.Sprintf("gave up after %d attempts over %s: %v", d.Attempt, age.Round(time.Second), err))
	}
	delay := c.cfg.Backoff.Delay(d.Attempt)
	m.retries.WithLabelValues(c.cfg.Name).Inc()
	log.Warn("event failed; retrying later", "err", err, "transient", sqldb.IsTransient(err), "retry_in", delay.Round(time.Millisecond))
	return rabbit.RetryAfter(delay, err.Error())
}

// Process runs one event through the inbox transaction, without the broker.
// It returns nil once committed, ErrAlreadyProcessed, ErrPayloadMismatch,
// ordering.ErrParked, an error wrapping ErrTooOld, or the error that rolled
// the attempt back.
func (c *Consumer) Process(ctx context.Context, e events.Envelope) error {
	return c.process(ctx, e, e.OccurredAt, c.commit)
}

// process is Process with the time the event is known to exist since (its
// timestamp, or, a message without one, its first failure) and the
// transaction step.
func (c *Consumer) process(ctx context.Context, e events.Envelope, since time.Time, step commitStep) error {
	if err := events.CheckVersion(e.Type, e.SchemaVersion); err != nil {
		return err
	}
	if err := c.checkAge(ctx, e, since); err != nil {
		return err
	}
	h, err := c.handler(ctx, e)
	if err != nil {
		return err
	}
	return step(ctx, e, h)
}

// commitStep commits one event with its handler.
type commitStep func(ctx context.Context, e events.Envelope, h Handler) error

// commit is the chapter's transaction for one event: BEGIN; the inbox row
// and the business change, in the order the event's ordering strategy
// says; COMMIT.
func (c *Consumer) commit(ctx context.Context, e events.Envelope, h Handler) error {
	var res ordering.Result
	// The inbox transaction as a child span of the process span: what of
	// the delivery's time is spent holding it (an external call is not).
	ctx, span := tracing.Tracer(ctx).Start(ctx, "transaction "+c.cfg.Name)
	defer span.End()
	err := sqldb.WithTx(ctx, c.cfg.DB, func(tx *sqlx.Tx) (err error) {
		// The event's ordering strategy says when apply runs: now, or for a
		// delta ahead of a gap later, with its parked successors.
		res, err = c.order.InOrder(ctx, tx, e, ordering.Steps{
			Apply:  func(e events.Envelope) error { return c.apply(ctx, tx, e, h) },
			Record: func(e events.Envelope) error { return ClaimPayload(ctx, tx, c.cfg.Name, e.EventID, e.Payload) },
		})
		return err
	})
	if err != nil {
		span.SetAttributes(attribute.Bool("ordersaga.rolled_back", true))
	}
	switch {
	case errors.Is(err, ordering.ErrAlreadyParked):
		return ErrAlreadyProcessed
	case err != nil:
		return err
	}
	c.cfg.Metrics.unparked.WithLabelValues(c.cfg.Name).Add(float64(res.Unparked))
	if res.Stale {
		c.cfg.Metrics.stale.WithLabelValues(c.cfg.Name).Inc()
	}
	if res.Parked {
		c.cfg.Metrics.parked.WithLabelValues(c.cfg.Name).Inc()
		return ordering.ErrParked
	}
	if c.cfg.AfterCommit != nil {
		c.cfg.AfterCommit()
	}
	return nil
}

// apply is the body of the chapter's transaction for one event: the inbox
// row first (its primary key decides between racing deliveries), then the
// business change and the consumer's own outbox events.
func (c *Consumer) apply(ctx context.Context, tx *sqlx.Tx, e events.Envelope, h Handler) error {
	if err := ClaimPayload(ctx, tx, c.cfg.Name, e.EventID, e.Payload); err != nil {
		return err
	}
	if err := failpoint.Inject(ctx, "inbox.after-claim"); err != nil {
		return err
	}
	if err := h(ctx, tx, e); err != nil {
		return err
	}
	// Window: business change made, not committed. Whatever happens here,
	// the inbox row and the change roll back together.
	return failpoint.Inject(ctx, "inbox.after-effect-before-commit")
}

// handler returns the Handler of e's type. An ExternalHandler calls out
// here, before any transaction, unless this consumer already has the event
// (Seen: a redelivery or a mismatch); the correctness check is still the
// inbox INSERT in apply.
func (c *Consumer) handler(ctx context.Context, e events.Envelope) (Handler, error) {
	if ext, ok := c.cfg.External[e.Type]; ok {
		if err := Seen(ctx, c.cfg.DB, c.cfg.Name, e.EventID, e.Payload); err != nil {
			return nil, err
		}
		return ext(ctx, e)
	}
	if h, ok := c.cfg.Handlers[e.Type]; ok {
		return h, nil
	}
	return nil, fmt.Errorf("%w: consumer %s has no handler for %s", events.ErrInvalid, c.cfg.Name, e.Type)
}

// checkAge refuses an event older than the replay window (ErrTooOld) unless
// the inbox still knows it: then it is a duplicate, or a mismatch, as usual.
func (c *Consumer) checkAge(ctx context.Context, e events.Envelope, since time.Time) error {
	if since.IsZero() {
		return nil
	}
	age := time.Since(since)
	if age <= c.cfg.ReplayWindow {
		return nil
	}
	if err := Seen(ctx, c.cfg.DB, c.cfg.Name, e.EventID, e.Payload); err != nil {
		return err
	}
	return fmt.Errorf("event is %s old, %w (%s): its inbox row may have been deleted; apply by hand after checking",
		age.Round(time.Second), ErrTooOld, c.cfg.ReplayWindow)
}

// deadLetter keeps the message as a dead letter (pkg/deadletter) and acks
// it. While the database refuses the record, the message stays on the
// broker (pkg/deadletter, "When the database is down"): a delayed retry, and
// when it comes back it is processed first, applied if the outage was all.
func (c *Consumer) deadLetter(ctx context.Context, log *slog.Logger, d rabbit.Delivery, reason string) rabbit.Decision {
	if err := deadletter.Record(ctx, c.cfg.DB, deadletter.FromDelivery(c.cfg.Name, d, reason)); err != nil {
		delay := c.cfg.Backoff.Delay(d.Attempt)
		c.cfg.Metrics.retries.WithLabelValues(c.cfg.Name).Inc()
		log.Error("could not record the dead letter; the message stays on the broker and comes back",
			"err", err, "reason", reason, "retry_in", delay.Round(time.Millisecond))
		return rabbit.RetryAfter(delay, err.Error())
	}
	c.cfg.Metrics.deadLetters.WithLabelValues(c.cfg.Name).Inc()
	log.Error("event dead-lettered", "reason", reason)
	return rabbit.Ack()
}

// HandleBrokerDeadLetter drains the queue's broker-side dead-letter queue
// (messages past the delivery limit) into the dead letters, so every dead
// letter of this consumer is in one searchable table.
func (c *Consumer) HandleBrokerDeadLetter(ctx context.Context, d rabbit.Delivery) rabbit.Decision {
	log := c.cfg.Log.With("consumer", c.cfg.Name, "event_id", d.MessageId, "event_type", d.Type)
	dec := c.deadLetter(ctx, log, d, "broker dead-lettered the message: "+d.DeathReason())
	settle(ctx, d, dec, outcome(ErrBrokerDeadLettered, dec))
	return dec
}

// Handler applies one event inside the consumer's transaction: the business
// change and the consumer's own result events (outbox.Add on the same tx).
// Return nil for a processed event, business rejections included (they are
// results, written as events). Wrap an error with Permanent, or return one
// wrapping events.ErrInvalid, when retrying can never help.
type Handler func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error

// ExternalHandler is for an event whose processing calls something outside
// the database (a payment provider). The call happens first, with no
// transaction open (no locks held across a network call); the returned
// Handler then records its outcome inside the inbox transaction. The
// external system must be idempotent (same key, same answer): a crash
// between the call and the commit repeats the call on redelivery.
type ExternalHandler func(ctx context.Context, e events.Envelope) (record Handler, err error)

type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() error { return p.err }

// Permanent marks err as not worth retrying: the message becomes a dead
// letter.
func Permanent(err error) error { return permanentError{err} }

func isPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p) || errors.Is(err, events.ErrInvalid) || errors.Is(err, ErrTooOld)
}

// ErrBrokerDeadLettered is the cause of a message the broker
// dead-lettered (its delivery limit), as the drain records it.
var ErrBrokerDeadLettered = errors.New("dead-lettered by the broker")

// ErrTooOld means the event is older than the inbox replay window: its row
// may have been deleted, so the inbox cannot say whether it was applied. A
// dead letter; an operator applies it by hand after checking.
var ErrTooOld = errors.New("older than the inbox replay window")

// DefaultReplayWindow is how long inbox rows are kept (INBOX_RETENTION) and
// so how old an event may be and still be deduplicated by the inbox.
const DefaultReplayWindow = 7 * 24 * time.Hour
