package rabbit

import (
	"context"
	"fmt"
	"log/slog"
	"math/bits"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/pkg/retry"
)

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

// scheduleRetry publishes a copy of the delivery to the retry queue of its
// tier, with the attempt counter and first-failure time in its headers.
func (c *Conn) scheduleRetry(ctx context.Context, pub *Publisher, d Delivery, delay time.Duration) error {
	tier := RetryTier(delay)
	name, err := c.retryQueue(ctx, d.Queue, tier)
	if err != nil {
		return err
	}
	headers := amqp.Table{}
	for k, v := range d.Headers {
		if !brokerHeader(k) {
			headers[k] = v
		}
	}
	headers[HeaderRetryAttempt] = int64(d.Attempt)
	first := d.FirstFailedAt
	if first.IsZero() {
		first = time.Now()
	}
	headers[HeaderFirstFailedAt] = first.UnixMilli()
	ms := delay.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	msg := Message{
		Exchange:   "",
		RoutingKey: name,
		Publishing: amqp.Publishing{
			Headers:       headers,
			ContentType:   d.ContentType,
			DeliveryMode:  amqp.Persistent,
			CorrelationId: d.CorrelationId,
			MessageId:     d.MessageId,
			Timestamp:     d.Timestamp,
			Type:          d.Type,
			Expiration:    fmt.Sprint(ms),
			Body:          d.Body,
		},
	}
	if err := pub.Publish(ctx, []Message{msg}, 5*time.Second)[0]; err != nil {
		c.forgetRetryQueue(name)
		return fmt.Errorf("publish to %s: %w", name, err)
	}
	return nil
}

// brokerHeader reports whether header k is one the broker writes on a
// delivery and a copy must not carry over: the quorum queue's delivery
// count and the first and last death. x-death stays: it is the message's
// record of every dead-lettering (one entry per queue and reason, with a
// count, so it does not grow with each retry), which DeathReason reads.
func brokerHeader(k string) bool {
	return k == "x-delivery-count" || strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-")
}

// DeathReason says why the broker dead-lettered d and from which queue,
// e.g. "delivery_limit on inventory.order-events": the latest x-death entry
// (the broker puts the most recent first) that is not a retry's hop through
// a holding queue (reason "expired": only retry tiers have a TTL).
func (d Delivery) DeathReason() string {
	deaths, _ := d.Headers["x-death"].([]any)
	for _, death := range deaths {
		if t, ok := death.(amqp.Table); ok && t["reason"] != "expired" {
			reason, _ := t["reason"].(string)
			queue, _ := t["queue"].(string)
			return reason + " on " + queue
		}
	}
	reason, _ := d.Headers["x-first-death-reason"].(string)
	return reason
}

var declaredRetryQueues sync.Map // queue name -> struct{}

func (c *Conn) retryQueue(ctx context.Context, queue string, tier int) (string, error) {
	name := RetryQueue(queue, tier)
	if _, ok := declaredRetryQueues.Load(name); ok {
		return name, nil
	}
	ch, err := c.Channel(ctx)
	if err != nil {
		return "", err
	}
	defer ch.Close()
	if _, err := declareRetryQueue(ch, queue, tier); err != nil {
		return "", err
	}
	declaredRetryQueues.Store(name, struct{}{})
	return name, nil
}

func (c *Conn) forgetRetryQueue(name string) { declaredRetryQueues.Delete(name) }
