package rabbit

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Topology is what a service declares on every (re)connect: the shared
// topic exchange, the dead-letter exchange and the service's own queues.
// Declarations are idempotent, so several services and instances may
// declare the same exchange.
type Topology struct {
	Exchange           string // topic exchange all events go to ("saga.events")
	DeadLetterExchange string // direct exchange for dead letters ("saga.dlx")
	Queues             []Queue
}

// Queue is one consumer's durable quorum queue.
type Queue struct {
	Name string   // <consumer>.<purpose>
	Keys []string // routing keys (event types) bound to it
	// DeliveryLimit bounds redeliveries of one message (consumer crashes,
	// lost channels); past it the broker dead-letters the message.
	DeliveryLimit int
}

// DeadQueue is where the broker dead-letters a queue's messages (delivery
// limit reached). Its consumer records them as dead letters and, while it
// cannot, keeps them on the broker through the dead queue's own retry tiers:
// the dead queue has no dead-letter exchange, so nothing may be rejected
// from it.
func (q Queue) DeadQueue() string { return q.Name + ".dead" }

// RetryQueue is the holding queue for delayed redelivery at one tier: a
// message waits there for its expiration, then is dead-lettered back to the
// main queue through the default exchange.
func RetryQueue(queue string, tier int) string { return fmt.Sprintf("%s.retry.%d", queue, tier) }

// Declare declares everything on a fresh channel of conn.
func (t Topology) Declare(conn *amqp.Connection) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(t.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("exchange %s: %w", t.Exchange, err)
	}
	if err := ch.ExchangeDeclare(t.DeadLetterExchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		return fmt.Errorf("exchange %s: %w", t.DeadLetterExchange, err)
	}
	for _, q := range t.Queues {
		limit := q.DeliveryLimit
		if limit <= 0 {
			limit = 20
		}
		args := amqp.Table{
			amqp.QueueTypeArg:           amqp.QueueTypeQuorum,
			"x-dead-letter-exchange":    t.DeadLetterExchange,
			"x-dead-letter-routing-key": q.Name,
			"x-delivery-limit":          int64(limit),
		}
		if _, err := ch.QueueDeclare(q.Name, true, false, false, false, args); err != nil {
			return fmt.Errorf("queue %s: %w", q.Name, err)
		}
		for _, key := range q.Keys {
			if err := ch.QueueBind(q.Name, key, t.Exchange, false, nil); err != nil {
				return fmt.Errorf("bind %s to %s: %w", q.Name, key, err)
			}
		}
		dead := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
		if _, err := ch.QueueDeclare(q.DeadQueue(), true, false, false, false, dead); err != nil {
			return fmt.Errorf("queue %s: %w", q.DeadQueue(), err)
		}
		if err := ch.QueueBind(q.DeadQueue(), q.Name, t.DeadLetterExchange, false, nil); err != nil {
			return fmt.Errorf("bind %s: %w", q.DeadQueue(), err)
		}
	}
	return nil
}

// declareRetryQueue declares the holding queue of one retry tier. It is a
// classic durable queue: it only holds persistent messages for a while, and
// per-message expiry there dead-letters them back to the main queue.
func declareRetryQueue(ch *amqp.Channel, queue string, tier int) (string, error) {
	name := RetryQueue(queue, tier)
	args := amqp.Table{
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": queue,
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		return "", fmt.Errorf("queue %s: %w", name, err)
	}
	return name, nil
}

// Delete removes every queue and exchange of the topology, including the
// retry tiers (of each queue and of its dead queue) up to maxTier. Tests
// use it to clean up after themselves.
func (t Topology) Delete(conn *amqp.Connection, maxTier int) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	for _, q := range t.Queues {
		names := []string{q.Name, q.DeadQueue()}
		for i := 0; i <= maxTier; i++ {
			names = append(names, RetryQueue(q.Name, i), RetryQueue(q.DeadQueue(), i))
		}
		for _, n := range names {
			if _, err := ch.QueueDelete(n, false, false, false); err != nil {
				return fmt.Errorf("delete queue %s: %w", n, err)
			}
		}
	}
	if err := ch.ExchangeDelete(t.Exchange, false, false); err != nil {
		return err
	}
	return ch.ExchangeDelete(t.DeadLetterExchange, false, false)
}
