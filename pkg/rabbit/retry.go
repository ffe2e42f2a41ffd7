package rabbit

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

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
