package rabbit

import (
	"context"
	"fmt"
	"log/slog"
	"math/bits"
	"runtime/debug"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/base/tracing"
)

// The consume loop's failpoints (pkg/aids/failpoint): a take held before it is
// handled, and a take that holds a delivery and its copy.
const (
	FailpointBeforeHandle = "rabbit.consume.before-handle"
	FailpointCopyInTake   = "rabbit.consume.copy-in-take"
)

// What a handler is given, a Delivery, and what it answers, a Decision,
// are in delivery.go.

// ConsumeConfig bounds one consume loop.
type ConsumeConfig struct {
	Queue          string
	Prefetch       int           // unacked messages the broker may push at once (default 32)
	Workers        int           // messages handled in parallel (default 8)
	HandlerTimeout time.Duration // bound on the handling of one delivery (default 30 s)
	// Batch is the most deliveries a worker hands to a BatchHandler at once
	// (default 1; at most Prefetch). It never waits for a batch to fill:
	// it takes one delivery, then only those the client already holds.
	Batch int
	Log   *slog.Logger
}

// Handler processes one delivery. Its ctx is not cancelled by shutdown: a
// message being handled finishes its transaction and is acked. A handler
// that panics loses nothing and stops nothing: the message goes back to its
// queue, whose delivery limit bounds the retries (see process).
type Handler func(ctx context.Context, d Delivery) Decision

// BatchHandler processes deliveries together and returns one decision per
// delivery, in their order. Its ctx is not cancelled by shutdown; its
// deadline is HandlerTimeout for each delivery, and the handler bounds
// each delivery's work within it.
type BatchHandler func(ctx context.Context, ds []Delivery) []Decision

// Consume runs the consume loop until ctx ends, coming back after lost
// channels and broker restarts. On shutdown it stops taking deliveries,
// lets in-flight handlers finish and ack, then closes its channel, which
// returns any prefetched but unhandled message to the queue.
func (c *Conn) Consume(ctx context.Context, cfg ConsumeConfig, handle Handler) error {
	cfg.Batch = 1
	return c.ConsumeBatch(ctx, cfg, func(ctx context.Context, ds []Delivery) []Decision {
		return []Decision{handle(ctx, ds[0])}
	})
}

// OneAtATime is h as a BatchHandler that handles each delivery of a take
// alone, in order.
func OneAtATime(h Handler) BatchHandler {
	return func(ctx context.Context, ds []Delivery) []Decision {
		out := make([]Decision, len(ds))
		for i, d := range ds {
			out[i] = h(ctx, d)
		}
		return out
	}
}

// ConsumeBatch is Consume with a handler that takes up to cfg.Batch
// deliveries at once: under load, the ones already waiting.
func (c *Conn) ConsumeBatch(ctx context.Context, cfg ConsumeConfig, handle BatchHandler) error {
	if cfg.Prefetch <= 0 {
		cfg.Prefetch = 32
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.HandlerTimeout <= 0 {
		cfg.HandlerTimeout = 30 * time.Second
	}
	cfg.Batch = max(1, min(cfg.Batch, cfg.Prefetch))
	if cfg.Log == nil {
		cfg.Log = c.log
	}
	log := cfg.Log.With("queue", cfg.Queue)
	pub := c.NewPublisher()
	defer pub.Close()
	backoff := retry.Backoff{Base: 200 * time.Millisecond, Cap: 5 * time.Second}
	failures := 0
	for {
		err := c.consumeOnce(ctx, cfg, log, pub, handle)
		if ctx.Err() != nil {
			return nil
		}
		failures++
		wait := backoff.Delay(failures)
		log.Warn("consume loop interrupted", "err", err, "retry_in", wait.Round(time.Millisecond))
		if !retry.Wait(ctx, wait) {
			return nil
		}
	}
}

func (c *Conn) consumeOnce(ctx context.Context, cfg ConsumeConfig, log *slog.Logger, pub *Publisher, handle BatchHandler) error {
	ch, err := c.Channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Qos(cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("qos: %w", err)
	}
	tag := fmt.Sprintf("%s-%d", cfg.Queue, time.Now().UnixNano())
	deliveries, err := ch.Consume(cfg.Queue, tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", cfg.Queue, err)
	}
	log.Info("consuming", "prefetch", cfg.Prefetch, "workers", cfg.Workers, "batch", cfg.Batch)

	// The client hands deliveries over through an unbuffered channel, one
	// at a time as its goroutine gets to run. For batches a pump moves them
	// into a buffered channel, where a worker sees the ones already waiting.
	// It never blocks: the broker sends at most Prefetch unacked messages.
	stop := make(chan struct{})
	defer close(stop)
	if cfg.Batch > 1 {
		buffered := make(chan amqp.Delivery, cfg.Prefetch)
		go pump(deliveries, buffered, stop)
		deliveries = buffered
	}

	abandon := make(chan struct{})
	var abandonOnce sync.Once
	var wg sync.WaitGroup
	for i := 0; i < cfg.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case <-abandon:
					return
				case d, ok := <-deliveries:
					if !ok {
						return
					}
					if c.process(ctx, cfg, log, pub, handle, waiting(deliveries, d, cfg.Batch)) {
						abandonOnce.Do(func() { close(abandon) })
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		// Stop the broker from pushing more before the channel closes.
		_ = ch.Cancel(tag, false)
		return nil
	}
	select {
	case <-abandon:
		return fmt.Errorf("channel abandoned without ack (failpoint)")
	default:
		return fmt.Errorf("delivery channel closed")
	}
}

// pump copies deliveries from in to out until in closes or stop does.
func pump(in <-chan amqp.Delivery, out chan<- amqp.Delivery, stop <-chan struct{}) {
	defer close(out)
	for d := range in {
		select {
		case out <- d:
		case <-stop:
			return
		}
	}
}

// waiting returns first and up to max-1 more deliveries that the client
// already holds, without waiting for any: a lone message is never delayed
// to fill a batch.
func waiting(deliveries <-chan amqp.Delivery, first amqp.Delivery, max int) []amqp.Delivery {
	batch := []amqp.Delivery{first}
	for len(batch) < max {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return batch
			}
			batch = append(batch, d)
		default:
			return batch
		}
	}
	return batch
}

// process handles a batch of deliveries and carries out the decisions, in
// order. It reports whether the channel must be abandoned; then the
// deliveries not yet settled go back to the queue with the channel.
//
// A handler that panics (or returns a wrong number of decisions) does not
// take the process down. Its deliveries are not acked, since nothing says
// their work committed: each is returned to its queue (nack, requeue),
// where the quorum queue counts the delivery and, past its delivery limit,
// dead-letters it to <queue>.dead, whose consumer records it in
// dead_letters. A failed batch is first handled again one delivery at a
// time, each with its own HandlerTimeout, so that only the deliveries that
// fail by themselves are returned and charged a delivery.
func (c *Conn) process(ctx context.Context, cfg ConsumeConfig, log *slog.Logger, pub *Publisher, handle BatchHandler, batch []amqp.Delivery) bool {
	dels := make([]Delivery, len(batch))
	for i, d := range batch {
		dels[i] = newDelivery(d, cfg.Queue)
	}
	// Window: a worker holds a take, nothing handled yet. A pause here
	// keeps the workers busy while deliveries wait behind them, so that
	// the next take holds all of them (the chaos run's copy-take).
	if err := failpoint.Inject(ctx, FailpointBeforeHandle); err != nil {
		for _, d := range dels {
			returnToQueue(ctx, log, d, err)
		}
		return false
	}
	if hasCopy(dels) {
		// Window: a take holds a delivery and its copy (one message_id
		// twice), as after a lost confirm.
		_ = failpoint.Inject(ctx, FailpointCopyInTake)
	}
	// HandlerTimeout is per delivery: a BatchHandler bounds each delivery
	// of its take itself, and the take as a whole gets the sum.
	decisions, err := call(ctx, cfg.HandlerTimeout*time.Duration(len(dels)), handle, dels)
	if err == nil {
		return c.settle(ctx, cfg, log, pub, dels, decisions)
	}
	if len(dels) == 1 {
		returnToQueue(ctx, log, dels[0], err)
		return false
	}
	log.Error("batch handler failed; handling its deliveries one at a time", "size", len(dels), "err", err)
	for _, d := range dels {
		one := []Delivery{d}
		decisions, err := call(ctx, cfg.HandlerTimeout, handle, one)
		if err != nil {
			returnToQueue(ctx, log, d, err)
			continue
		}
		if c.settle(ctx, cfg, log, pub, one, decisions) {
			return true
		}
	}
	return false
}

// hasCopy reports whether two deliveries of the take carry one message_id.
func hasCopy(dels []Delivery) bool {
	for i := range dels {
		for j := i + 1; j < len(dels); j++ {
			if dels[i].MessageId != "" && dels[i].MessageId == dels[j].MessageId {
				return true
			}
		}
	}
	return false
}

// handlerPanic is a panic recovered from a handler, with the stack of the
// goroutine where it happened.
type handlerPanic struct {
	value any
	stack []byte
}

func (p *handlerPanic) Error() string { return fmt.Sprintf("handler panicked: %v", p.value) }

// call runs handle on dels with its own timeout (not cancelled by
// shutdown: a message being handled finishes its transaction). A panic
// comes back as a *handlerPanic, a wrong number of decisions as an error.
func call(ctx context.Context, timeout time.Duration, handle BatchHandler, dels []Delivery) (decisions []Decision, err error) {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			decisions, err = nil, &handlerPanic{value: v, stack: debug.Stack()}
		}
	}()
	decisions = handle(hctx, dels)
	if len(decisions) != len(dels) {
		return nil, fmt.Errorf("handler returned %d decisions for %d deliveries", len(decisions), len(dels))
	}
	return decisions, nil
}

// returnToQueue nacks d with requeue after its handler failed. The requeue
// is immediate but bounded: the quorum queue's delivery limit caps how
// often it happens to one message, then dead-letters it (有限重试与死信),
// so it is not the endless instant requeue the chapter forbids.
func returnToQueue(ctx context.Context, log *slog.Logger, d Delivery, err error) {
	span := tracing.StartSettle(ctx, d.Creation(), d.Queue, "nack", "returned")
	defer span.End()
	tracing.Fail(span, "handler_failed", err)
	attrs := []any{"message_id", d.MessageId, "err", err}
	if p, ok := err.(*handlerPanic); ok {
		attrs = append(attrs, "stack", string(p.stack))
	}
	log.Error("handler failed; returning the message to its queue, whose delivery limit dead-letters it if it keeps failing", attrs...)
	if err := d.Nack(false, true); err != nil {
		log.Warn("nack failed; the broker returns the message when the channel closes", "message_id", d.MessageId, "err", err)
	}
}

// settle carries out the decisions on dels, in order, and reports whether
// the channel must be abandoned.
func (c *Conn) settle(ctx context.Context, cfg ConsumeConfig, log *slog.Logger, pub *Publisher, dels []Delivery, decisions []Decision) bool {
	for i, dec := range decisions {
		d := dels[i]
		switch dec.kind {
		case decideAck:
			if err := d.Ack(false); err != nil {
				log.Warn("ack failed; the broker will redeliver and the inbox will suppress it", "message_id", d.MessageId, "err", err)
			}
		case decideNothing:
		case decideAbandon:
			log.Warn("abandoning channel without ack", "message_id", d.MessageId, "reason", dec.Reason)
			return true
		case decideRetry:
			c.retryLater(ctx, cfg, log, pub, d, dec.delay)
		}
	}
	return false
}

// retryLater puts the delayed copy of d in its retry queue, then acks d.
// When the copy cannot be published (a broker refusing, a retry queue that
// cannot be declared), d is not requeued at once: 不要无限立即 requeue, an
// instant requeue is a hot loop on one bad message. It stays with this
// worker, unacked (still on the broker), while the copy is tried again with
// backoff for up to HandlerTimeout. Only then, or at shutdown, is it
// returned to its queue, where the quorum queue's delivery limit counts it.
func (c *Conn) retryLater(ctx context.Context, cfg ConsumeConfig, log *slog.Logger, pub *Publisher, d Delivery, delay time.Duration) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.HandlerTimeout)
	defer cancel()
	backoff := retry.Backoff{Base: 200 * time.Millisecond, Cap: 5 * time.Second}
	for failures := 1; ; failures++ {
		err := c.scheduleRetry(sctx, pub, d, delay)
		if err == nil {
			break
		}
		wait := backoff.Delay(failures)
		if deadline, _ := sctx.Deadline(); time.Now().Add(wait).After(deadline) || !retry.Wait(ctx, wait) {
			log.Error("could not schedule the retry; returning the message to its queue", "message_id", d.MessageId,
				"err", err, "tries", failures)
			_ = d.Nack(false, true)
			return
		}
		log.Warn("could not schedule the retry; trying again", "message_id", d.MessageId, "err", err,
			"retry_in", wait.Round(time.Millisecond))
	}
	if err := d.Ack(false); err != nil {
		log.Warn("ack after retry scheduling failed; the message may run twice", "message_id", d.MessageId, "err", err)
	}
}

// retryTierBase is the delay of retry tier 0; tier k holds delays in
// [base*2^k, base*2^(k+1)). Expiry is per message, and a queue only expires
// its head, so one queue per tier keeps a short delay from waiting behind a
// long one: within a tier delays differ by less than 2x.
const retryTierBase = 250 * time.Millisecond

const maxRetryTier = 12 // about 17 minutes

// RetryTier returns the retry queue tier for a delay.
func RetryTier(delay time.Duration) int {
	if delay < retryTierBase {
		return 0
	}
	t := bits.Len64(uint64(delay/retryTierBase)) - 1
	if t > maxRetryTier {
		t = maxRetryTier
	}
	return t
}
