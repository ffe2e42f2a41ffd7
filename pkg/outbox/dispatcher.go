package outbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	"go.opentelemetry.io/otel/trace"

	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/aids/wrongway"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/tracing"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// Publisher sends one batch and reports, per message, whether the broker
// confirmed it (nil) or not. *rabbit.Publisher is the real one.
type Publisher interface {
	Publish(ctx context.Context, msgs []rabbit.Message, confirmTimeout time.Duration) []error
	Close()
}

// RabbitPublishers is the NewPublisher of a real deployment: one confirming
// rabbit.Publisher per worker, with the after-publish failpoint wired in.
func RabbitPublishers(conn *rabbit.Conn) func() Publisher {
	return func() Publisher {
		return conn.NewPublisher(rabbit.AfterSendFailpoint("outbox.dispatch.after-publish-before-confirm"))
	}
}

// Dispatcher moves committed events from outbox_events to the broker. Any
// number of dispatchers, in any number of processes, may run on one table.
type Dispatcher struct {
	db  *sqlx.DB
	cfg Config
	// wake holds at most one token, shared by the workers: a commit wakes
	// one idle worker, not all of them. Waking every worker made each
	// commit cost one useful claim plus an empty claim transaction per
	// other worker (measured: 8.5 empty claims per order in the saga).
	wake chan struct{}
	m    *metrics
	// mark is how a batch's confirmed rows are marked sent: markSent, the
	// chapter's way; in demo mode, while its switch is on, the lab's wrong
	// way (wrongway.go).
	mark func() markFunc
}

// markFunc marks the rows ids of a claim sent and returns how many it
// marked.
type markFunc func(ctx context.Context, db sqlx.ExecerContext, token string, ids []string) (int64, error)

// DefaultConfirmTimeout is the wait for confirms derived from the lease: a
// third of it, at most 5 s (a broker that has not confirmed by then is
// treated as not having the message; the retry re-sends it).
func DefaultConfirmTimeout(lease time.Duration) time.Duration { return min(5*time.Second, lease/3) }

// New returns a dispatcher; Run starts it. It panics on a ConfirmTimeout
// longer than a third of the Lease (pkg/compose/process refuses such settings).
func New(db *sqlx.DB, cfg Config) *Dispatcher {
	cfg.setDefaults()
	if cfg.ConfirmTimeout > cfg.Lease/3 {
		panic(fmt.Sprintf("outbox: confirm timeout %s is more than a third of the lease %s", cfg.ConfirmTimeout, cfg.Lease))
	}
	return &Dispatcher{db: db, cfg: cfg, wake: make(chan struct{}, 1), m: newMetrics(db, cfg.Registerer, cfg.Log),
		mark: wrongway.Pick(cfg.WrongWay, markFunc(markSent), wrongWays...)}
}

// Wake tells the workers that events were just committed. It never blocks.
// When a token is already waiting, the worker that takes it will claim
// after this call, so after the caller's commit: a second token would add
// nothing.
func (d *Dispatcher) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Result counts what one batch did.
type Result struct {
	Claimed int // rows claimed
	Sent    int // confirmed and marked sent under our token
	Retried int // handed back to 'pending' with a backoff
	Failed  int // attempts used up: now 'failed'
	Lost    int // no longer ours when we came to mark them (lease expired and re-claimed)
}

// Run runs the workers, the fallback poller and the lease recovery until ctx
// ends. A worker finishes the batch it is in before returning.
func (d *Dispatcher) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for i := range d.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.work(ctx, i)
		}()
	}
	wg.Add(2)
	go func() { defer wg.Done(); d.poll(ctx) }()
	go func() { defer wg.Done(); d.recoverLoop(ctx) }()
	wg.Wait()
	return nil
}

func (d *Dispatcher) work(ctx context.Context, i int) {
	pub := d.cfg.NewPublisher()
	defer pub.Close()
	log := d.cfg.Log.With("worker", i)
	errBackoff := retry.Backoff{Base: 100 * time.Millisecond, Cap: 10 * time.Second}
	failures := 0
	for {
		// The batch itself is not cut short by shutdown: it runs on a
		// context without cancel, bounded by the confirm timeout.
		res, err := d.DispatchOnce(context.WithoutCancel(ctx), pub)
		if err != nil {
			failures++
			wait := errBackoff.Delay(failures)
			log.Warn("dispatch batch failed", "err", err, "retry_in", wait.Round(time.Millisecond))
			if !retry.Wait(ctx, wait) {
				return
			}
			continue
		}
		failures = 0
		if ctx.Err() != nil {
			return
		}
		if res.Claimed == d.cfg.BatchSize {
			// A full batch: there is probably more. Pass a token on so an
			// idle worker claims the next batch while this one publishes.
			d.Wake()
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		}
	}
}

// poll is the fallback for events this process was not told about (written
// by another instance, or due again after a backoff): one cheap query per
// interval, and a wake-up only when something is due.
func (d *Dispatcher) poll(ctx context.Context) {
	retry.Every(ctx, d.cfg.PollInterval, func() {
		qctx, cancel := context.WithTimeout(ctx, d.cfg.PollInterval)
		due, err := anyDue(qctx, d.db)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			d.cfg.Log.Warn("outbox poll failed", "err", err)
		case err == nil && due:
			d.Wake()
		}
	})
}

func (d *Dispatcher) recoverLoop(ctx context.Context) {
	retry.Every(ctx, d.cfg.RecoverInterval, func() {
		if _, err := d.RecoverExpired(ctx); err != nil && ctx.Err() == nil {
			d.cfg.Log.Warn("lease recovery failed", "err", err)
		}
	})
}

// RecoverExpired hands back every row whose lease has expired, in batches,
// and reports how many. An expired lease is a failed attempt (the claim
// counted it): the row goes back to 'pending' after the backoff of its
// attempts, or to 'failed' when they are used up or its deadline has
// passed. Each batch is one short transaction, so nobody sees a row
// between its expiry and its release. The dispatcher that held it may still
// be alive and slow: its later mark-sent then changes nothing, because its
// claim token is gone.
func (d *Dispatcher) RecoverExpired(ctx context.Context) (int, error) {
	total := 0
	for round := 0; round < 100; round++ { // bounded: 100 batches per run
		var rows []claimed
		var done []released
		err := sqldb.WithTx(ctx, d.db, func(tx *sqlx.Tx) (err error) {
			done = done[:0]
			if rows, err = lockExpired(ctx, tx, d.cfg.RecoverBatch); err != nil {
				return err
			}
			for _, r := range rows {
				rel, err := d.release(ctx, tx, r.ClaimToken, r)
				if err != nil {
					return err
				}
				done = append(done, rel)
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		for _, rel := range done { // counted once committed
			d.note(rel, errLeaseExpired, &Result{})
		}
		total += len(rows)
		if len(rows) < d.cfg.RecoverBatch {
			break
		}
	}
	if total > 0 {
		d.m.recovered.Add(float64(total))
		d.cfg.Log.Warn("recovered expired outbox leases", "rows", total)
		d.Wake()
	}
	return total, nil
}

// DispatchOnce claims one batch, publishes it, waits for the confirms and
// records the outcome of every event. Exported for tests and experiments.
func (d *Dispatcher) DispatchOnce(ctx context.Context, pub Publisher) (Result, error) {
	// "Dispatcher stopped": a pause here keeps committed events pending.
	if err := failpoint.Inject(ctx, "outbox.dispatch.before-claim"); err != nil {
		return Result{}, fmt.Errorf("before claim: %w", err)
	}
	token, rows, err := claim(ctx, d.db, d.cfg.BatchSize, d.cfg.Lease)
	if err != nil {
		return Result{}, err
	}
	if len(rows) == 0 {
		d.m.claims.WithLabelValues("empty").Inc()
		return Result{}, nil
	}
	d.m.claims.WithLabelValues("rows").Inc()
	res := Result{Claimed: len(rows)}
	start := time.Now()
	defer func() { d.m.batchSeconds.Observe(time.Since(start).Seconds()) }()

	// Window: claimed, nothing sent. A crash here leaves the rows 'sending'
	// until their lease expires; recovery then re-queues them.
	if err := failpoint.Inject(ctx, "outbox.dispatch.after-claim"); err != nil {
		return res, fmt.Errorf("after claim: %w", err)
	}

	errs := d.publish(ctx, pub, token, rows)

	// Window: the broker has the messages, our table still says 'sending'.
	// A crash here re-sends them after the lease expires: consumers see the
	// same event_id twice and their inbox suppresses the second.
	if err := failpoint.Inject(ctx, "outbox.dispatch.after-confirm-before-mark"); err != nil {
		return res, fmt.Errorf("after confirm: %w", err)
	}

	sent, err := d.releaseUnconfirmed(ctx, token, rows, errs, &res)
	if err != nil {
		return res, err
	}
	if len(sent) > 0 {
		if err := d.markConfirmed(ctx, token, sent, &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// publish sends the claimed rows as one batch, renewing our lease while it
// waits for the confirms, and returns one error per row (nil: confirmed).
// Each message has its send span: child of its create span, whose context
// the row kept, and linked to it (pkg/base/tracing).
func (d *Dispatcher) publish(ctx context.Context, pub Publisher, token string, rows []claimed) []error {
	msgs := make([]rabbit.Message, len(rows))
	ids := make([]string, len(rows))
	spans := make([]trace.Span, len(rows))
	for i, r := range rows {
		ids[i] = r.EventID
		spans[i] = tracing.StartSend(ctx, d.cfg.Exchange, tracing.Parse(r.Traceparent.String),
			tracing.Message{ID: r.EventID, RoutingKey: r.EventType, ConversationID: strconv.FormatUint(r.AggregateID, 10)},
			r.Attempts)
		msgs[i] = rabbit.FromEnvelope(d.cfg.Exchange, r.envelope())
	}
	stopRenewing := d.renewWhilePublishing(ctx, token, ids)
	errs := pub.Publish(ctx, msgs, d.cfg.ConfirmTimeout)
	stopRenewing()
	for i, span := range spans {
		if errs[i] != nil {
			tracing.Fail(span, publishResult(errs[i]), errs[i])
		}
		span.End()
	}
	return errs
}

// envelope is the event a claimed row holds, as the wire contract carries
// it: the order id is its correlation id.
func (r claimed) envelope() events.Envelope {
	return events.Envelope{
		EventID:          r.EventID,
		Type:             r.EventType,
		AggregateID:      r.AggregateID,
		AggregateVersion: r.AggregateVersion,
		SchemaVersion:    r.SchemaVersion,
		CorrelationID:    strconv.FormatUint(r.AggregateID, 10),
		OccurredAt:       r.CreatedAt,
		Payload:          r.Payload,
		Traceparent:      r.Traceparent.String,
		CorrectsEventID:  r.CorrectsEventID.String,
	}
}

// releaseUnconfirmed counts the publish outcome of every row, hands back
// the rows the broker did not confirm (a failed attempt: pending after a
// backoff, or failed), and returns the ids of the confirmed ones.
func (d *Dispatcher) releaseUnconfirmed(ctx context.Context, token string, rows []claimed, errs []error, res *Result) (sent []string, err error) {
	for i, r := range rows {
		if r.Attempts > 1 {
			d.m.resends.Inc() // a re-send of an event already tried: consumers may see it twice
		}
		if errs[i] == nil {
			sent = append(sent, r.EventID)
			d.m.publish.WithLabelValues("confirmed").Inc()
			continue
		}
		d.m.publish.WithLabelValues(publishResult(errs[i])).Inc()
		rel, err := d.release(ctx, d.db, token, r)
		if err != nil {
			return sent, err
		}
		d.note(rel, errs[i], res)
	}
	return sent, nil
}

// markConfirmed marks the confirmed rows sent. Mark sent only under our
// claim token (chapter rule), and check the row count: fewer rows means a
// lease expired and another dispatcher owns those events now; we must not
// overwrite its state.
func (d *Dispatcher) markConfirmed(ctx context.Context, token string, sent []string, res *Result) error {
	n, err := d.mark()(ctx, d.db, token, sent)
	if err != nil {
		return err
	}
	res.Sent = int(n)
	if lost := len(sent) - int(n); lost > 0 {
		res.Lost += lost
		d.m.claimsLost.Add(float64(lost))
		d.cfg.Log.Warn("claim lost before mark-sent: another dispatcher owns these events now",
			"lost", lost, "claim_token", token)
	}
	return nil
}

// errLeaseExpired is the cause RecoverExpired logs for a claim whose lease
// ran out before it was marked.
var errLeaseExpired = errors.New("lease expired before the event was marked")

// released is what became of one row handed back after a failed attempt.
type released struct {
	row    claimed
	status string // StatusPending, StatusFailed, or "" when it was no longer ours
	delay  time.Duration
}

// release hands back one row held under token after a failed attempt:
// pending after the backoff of its attempts, or failed at either bound.
func (d *Dispatcher) release(ctx context.Context, db sqlx.ExecerContext, token string, r claimed) (released, error) {
	rel := released{row: r, delay: d.cfg.Backoff.Delay(r.Attempts)}
	var err error
	rel.status, err = releaseRow(ctx, db, token, r.EventID, rel.delay, d.cfg.MaxAttempts, d.cfg.Deadline)
	return rel, err
}

// note logs and counts what became of a released row, in res.
func (d *Dispatcher) note(rel released, cause error, res *Result) {
	r := rel.row
	log := d.cfg.Log.With("event_id", r.EventID, "event_type", r.EventType,
		"order_id", r.AggregateID, "attempts", r.Attempts, "err", cause)
	switch rel.status {
	case "":
		res.Lost++
		d.m.claimsLost.Inc()
	case StatusFailed:
		res.Failed++
		d.m.failed.Inc()
		log.Error("ALERT: outbox event failed: attempts used up or retried past its deadline; kept as 'failed' for an operator",
			"max_attempts", d.cfg.MaxAttempts, "deadline", d.cfg.Deadline)
	default:
		res.Retried++
		log.Warn("attempt failed; will retry", "retry_in", rel.delay.Round(time.Millisecond))
	}
}

// renewWhilePublishing extends our lease every third of it while a slow
// publish is in progress, so recovery does not hand a live batch to another
// dispatcher. It runs only during Publish: a worker that is stuck elsewhere
// (paused, crashed) stops renewing and loses its claim, as it should.
func (d *Dispatcher) renewWhilePublishing(ctx context.Context, token string, ids []string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(d.cfg.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n, err := renewLease(ctx, d.db, token, ids, d.cfg.Lease)
				if err != nil {
					d.cfg.Log.Warn("lease renewal failed", "err", err)
					continue
				}
				d.m.renewals.Inc()
				d.cfg.Log.Info("renewed outbox lease during a slow publish", "rows", n)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

func publishResult(err error) string {
	switch {
	case errors.Is(err, rabbit.ErrReturned):
		return "returned"
	case errors.Is(err, rabbit.ErrNacked):
		return "nacked"
	case errors.Is(err, rabbit.ErrConfirmTimeout):
		return "timeout"
	default:
		return "error"
	}
}
