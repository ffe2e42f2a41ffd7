package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// Consumer is one inbox consumer of the stack, as the messaging contract
// names it (docs/contract.md): its service, its queue (without the
// stack's namespace) and the failpoint that fails its transaction after
// the effect (a transient failure: the delivery goes to a retry tier).
type Consumer struct {
	Name, Service, Queue string
	Keys                 []events.Type // the event types bound to its queue
	// Fail is armed with error on the service's instances to send the
	// consumer's deliveries to their retry tiers.
	Fail string
}

// Consumers are the stack's five consumers, in the saga's order.
var Consumers = []Consumer{
	{Name: "inventory", Service: "inventory", Queue: "inventory.order-events", Fail: "inbox.after-effect-before-commit",
		Keys: []events.Type{events.OrderCreated, events.OrderConfirmed, events.OrderCancelled}},
	{Name: "payment", Service: "payment", Queue: "payment.saga-events", Fail: "inbox.after-effect-before-commit",
		Keys: []events.Type{events.InventoryReserved, events.OrderCancelled}},
	{Name: "payment-psp", Service: "payment", Queue: "payment.psp-commands", Fail: "payment.charge.after-psp-before-record",
		Keys: []events.Type{events.PaymentChargeRequested}},
	{Name: "payment-refunds", Service: "payment", Queue: "payment.refund-commands", Fail: "payment.refund.after-psp-before-record",
		Keys: []events.Type{events.PaymentRefundRequested}},
	{Name: "order", Service: "order", Queue: "order.saga-results", Fail: "inbox.after-effect-before-commit",
		Keys: []events.Type{events.InventoryReserved, events.InventoryRejected, events.InventoryReservationExpired,
			events.InventoryCommitFailed, events.PaymentSucceeded, events.PaymentFailed, events.PaymentRefunded}},
}

// takes reports whether the consumer's queue gets messages of d's type.
func (c Consumer) takes(d amqp.Delivery) bool {
	return slices.ContainsFunc(c.Keys, func(k events.Type) bool { return string(k) == d.Type })
}

// consumerNamed is the consumer of that name.
func consumerNamed(name string) (Consumer, bool) {
	for _, c := range Consumers {
		if c.Name == name {
			return c, true
		}
	}
	return Consumer{}, false
}

// Bus is the stack's broker as the run reaches it over AMQP: to read how
// many messages wait in a queue, to take one out of a retry tier and to
// publish copies of messages straight to a consumer's queue. Only the
// copy-take and node-kill faults use it. Its connection is named
// "chaos run" (no exchange in the name: the broker-close fault closes the
// stack's connections, not the run's), and is dialed again when lost.
type Bus struct {
	URLs string           // every node, comma-separated (rabbit.SplitURLs)
	NS   rabbit.Namespace // the stack's namespace ("" for scripts/up.sh)

	mu   sync.Mutex
	conn *amqp.Connection
}

// channel opens a channel, dialing the first node that answers when the
// connection is lost.
func (b *Bus) channel(ctx context.Context) (*amqp.Channel, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for try := 0; try < 2; try++ {
		if b.conn == nil || b.conn.IsClosed() {
			var errs []error
			b.conn = nil
			for _, u := range rabbit.SplitURLs(b.URLs) {
				c, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second),
					Properties: amqp.Table{"connection_name": fmt.Sprintf("chaos run pid %d", os.Getpid())}})
				if err == nil {
					b.conn = c
					break
				}
				errs = append(errs, err)
			}
			if b.conn == nil {
				return nil, fmt.Errorf("the stack's broker over AMQP: %w", errors.Join(errs...))
			}
		}
		ch, err := b.conn.Channel()
		if err == nil {
			return ch, nil
		}
		b.conn.Close()
		b.conn = nil
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return nil, errors.New("the stack's broker over AMQP: no channel")
}

// Close drops the connection, if one was opened.
func (b *Bus) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn != nil {
		b.conn.Close()
		b.conn = nil
	}
}

// Queue is a queue's name in the stack's namespace.
func (b *Bus) Queue(name string) string { return b.NS.Queue(name) }

// Waiting is how many messages of queue wait to be delivered (ready, not
// in a consumer's hands); a queue that does not exist has none.
func (b *Bus) Waiting(ctx context.Context, queue string) (int, error) {
	ch, err := b.channel(ctx)
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return 0, nil
	}
	return q.Messages, err
}

// Publish sends msgs to queue (through the default exchange, so no other
// queue gets them), one after the other, and waits for the broker's
// confirms; a message no queue took is an error.
func (b *Bus) Publish(ctx context.Context, queue string, msgs ...amqp.Publishing) error {
	ch, err := b.channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	returned := ch.NotifyReturn(make(chan amqp.Return, len(msgs)))
	confirms := make([]*amqp.DeferredConfirmation, len(msgs))
	for i, m := range msgs {
		if confirms[i], err = ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, m); err != nil {
			return fmt.Errorf("publish to %s: %w", queue, err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, c := range confirms {
		if ok, err := c.WaitContext(wctx); err != nil || !ok {
			return fmt.Errorf("publish to %s: not confirmed (%v)", queue, err)
		}
	}
	select {
	case r := <-returned:
		return fmt.Errorf("publish to %s: returned: %s", queue, r.ReplyText)
	default:
		return nil
	}
}

// Held is a message the run took out of a queue and has not acked: until
// Ack, the broker keeps it, and gives it back to the queue if the run's
// connection ends.
type Held struct {
	amqp.Delivery
	ch   *amqp.Channel
	done *sync.Once
}

// Ack removes the held message for good; Return gives it back to its
// queue. Only the first of them acts.
func (h Held) Ack() error    { return h.settle(func() error { return h.Delivery.Ack(false) }) }
func (h Held) Return() error { return h.settle(func() error { return h.Delivery.Nack(false, true) }) }

func (h Held) held() bool { return h.ch != nil }

func (h Held) settle(f func() error) error {
	if h.ch == nil {
		return nil
	}
	var err error
	h.done.Do(func() { err = f(); h.ch.Close() })
	return err
}

// TakeFirst polls queues until one of them has a message accepted by
// want, and holds it (unacked); the messages want refuses go back at
// once. A queue that does not exist yet (a retry tier no delivery has
// needed) is asked again a second later. It gives up after patience.
func (b *Bus) TakeFirst(ctx context.Context, queues []string, want func(amqp.Delivery) bool, patience time.Duration) (Held, error) {
	var ch *amqp.Channel
	var err error
	defer func() {
		if ch != nil {
			ch.Close()
		}
	}()
	missing := map[string]time.Time{}
	deadline := time.Now().Add(patience)
	for {
		for _, q := range queues {
			if time.Since(missing[q]) < time.Second {
				continue
			}
			if ch == nil || ch.IsClosed() {
				if ch, err = b.channel(ctx); err != nil {
					return Held{}, err
				}
			}
			d, ok, err := ch.Get(q, false)
			var ae *amqp.Error
			switch {
			case errors.As(err, &ae) && ae.Code == amqp.NotFound:
				missing[q] = time.Now() // the broker closed the channel: opened again above
			case err == nil && ok && want(d):
				held := Held{Delivery: d, ch: ch, done: &sync.Once{}}
				ch = nil
				return held, nil
			case err == nil && ok:
				_ = d.Nack(false, true)
			}
		}
		if time.Now().After(deadline) {
			return Held{}, fmt.Errorf("no message in %s within %s", strings.Join(queues, ", "), patience)
		}
		select {
		case <-ctx.Done():
			return Held{}, ctx.Err()
		case <-time.After(40 * time.Millisecond):
		}
	}
}

// Fresh is the message as its producer published it: d without what the
// retry path and the broker added on the way (the retry headers, the
// dead-letter history, the expiry of its retry tier). Republished to the
// consumer's queue, it is a copy of the original delivery: same
// message_id, body and producer headers.
func Fresh(d amqp.Delivery) amqp.Publishing {
	headers := amqp.Table{}
	for k, v := range d.Headers {
		if k == rabbit.HeaderRetryAttempt || k == rabbit.HeaderFirstFailedAt || strings.HasPrefix(k, "x-") {
			continue
		}
		headers[k] = v
	}
	return amqp.Publishing{Headers: headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: amqp.Persistent, CorrelationId: d.CorrelationId, MessageId: d.MessageId, Timestamp: d.Timestamp,
		Type: d.Type, AppId: d.AppId, Body: d.Body}
}

// Filler is a copy of a message its consumer has processed, made so that
// every path drops it as a duplicate on its own: marked as a later
// attempt (the batch layer takes no retry into a shared transaction) and
// dated beyond any inbox replay window (neither does the layer of earlier
// versions, and the inbox looks the event up before refusing it as too
// old: a duplicate). The copy-take fault keeps workers busy with them.
func Filler(p amqp.Publishing) amqp.Publishing {
	h := amqp.Table{}
	for k, v := range p.Headers {
		h[k] = v
	}
	h[rabbit.HeaderRetryAttempt] = int64(1)
	h[rabbit.HeaderFirstFailedAt] = time.Now().UnixMilli()
	p.Headers = h
	p.Timestamp = time.Now().Add(-400 * 24 * time.Hour)
	return p
}

// firstTiers are the retry tiers of queue a delivery waits in after its
// first few failures (0.25 to 4 s), the shortest first.
func firstTiers(queue string) []string {
	var out []string
	for tier := range 4 {
		out = append(out, rabbit.RetryQueue(queue, tier))
	}
	return out
}

// Capture binds a queue of the run's own to the stack's exchange with the
// consumer's event types: it keeps a copy of the latest events published
// to the consumer, exactly as published (the copy-take fault's fillers).
// A quorum queue, so that a node kill does not take it away; the broker
// deletes it once unused for ten minutes. Declaring it again is harmless.
func (b *Bus) Capture(ctx context.Context, c Consumer, tag string) (string, error) {
	ch, err := b.channel(ctx)
	if err != nil {
		return "", err
	}
	defer ch.Close()
	name := b.NS.Queue("chaos.capture." + c.Name + "." + tag)
	args := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum, "x-max-length": int64(captured), "x-overflow": "drop-head",
		"x-expires": int64(10 * time.Minute / time.Millisecond)}
	if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		return "", fmt.Errorf("declare %s: %w", name, err)
	}
	for _, k := range c.Keys {
		if err := ch.QueueBind(name, string(k), b.NS.Exchange(), false, nil); err != nil {
			return "", fmt.Errorf("bind %s to %s: %w", name, k, err)
		}
	}
	return name, nil
}

// captured is how many of a consumer's latest events its capture keeps.
const captured = 20

// Drain takes every message waiting in queue (acked: they are gone).
func (b *Bus) Drain(ctx context.Context, queue string) ([]amqp.Delivery, error) {
	ch, err := b.channel(ctx)
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	var out []amqp.Delivery
	for range 10 * captured {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			return out, fmt.Errorf("get from %s: %w", queue, err)
		}
		if !ok {
			break
		}
		out = append(out, d)
	}
	return out, nil
}

// consumerQueues are the queues of the stack's consumers: each one's
// queue, its dead queue and its retry tiers (up to the one of a minute,
// the longest wait of inbox.Config's backoff).
func (b *Bus) consumerQueues() []string {
	var names []string
	for _, c := range Consumers {
		q := b.Queue(c.Queue)
		names = append(names, q, rabbit.Queue{Name: q}.DeadQueue())
		for tier := range rabbit.RetryTier(time.Minute) + 1 {
			names = append(names, rabbit.RetryQueue(q, tier))
		}
	}
	return names
}

// Backlog is what waits on the broker for the stack's consumers: the ready
// messages of each of their queues (consumerQueues); queues that hold none
// are left out.
func (b *Bus) Backlog(ctx context.Context) (map[string]int, error) {
	names := b.consumerQueues()
	out := map[string]int{}
	var ch *amqp.Channel
	defer func() {
		if ch != nil {
			ch.Close()
		}
	}()
	for _, name := range names {
		if ch == nil || ch.IsClosed() {
			var err error
			if ch, err = b.channel(ctx); err != nil {
				return nil, err
			}
		}
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		var ae *amqp.Error
		switch {
		case errors.As(err, &ae) && ae.Code == amqp.NotFound: // never declared: holds none (the channel is closed)
		case err != nil:
			return nil, fmt.Errorf("%s: %w", name, err)
		case q.Messages > 0:
			out[name] = q.Messages
		}
	}
	return out, nil
}
