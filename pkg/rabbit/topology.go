package rabbit

import (
	"errors"
	"fmt"
	"strings"

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
// main queue through the default exchange. The name is not the
// "<queue>.retry.<tier>" of earlier versions: those were classic queues,
// and a queue cannot change its type, so the quorum tiers are new queues
// and the old ones drain by themselves (docs/operations.md, "Upgrading the
// queues").
func RetryQueue(queue string, tier int) string { return fmt.Sprintf("%s.delay.%d", queue, tier) }

// Declare declares everything on conn.
func (t Topology) Declare(conn *amqp.Connection) error {
	_, err := t.declare(conn)
	return err
}

// declare declares everything on conn and returns the queues it found
// declared by an earlier version (see declareQueue).
func (t Topology) declare(conn *amqp.Connection) (earlier []string, err error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(t.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return nil, fmt.Errorf("exchange %s: %w", t.Exchange, err)
	}
	if err := ch.ExchangeDeclare(t.DeadLetterExchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		return nil, fmt.Errorf("exchange %s: %w", t.DeadLetterExchange, err)
	}
	for _, q := range t.Queues {
		old, err := declareQueue(conn, q.Name, t.QueueArguments(q))
		if err != nil {
			return earlier, fmt.Errorf("queue %s: %w", q.Name, err)
		}
		if old {
			earlier = append(earlier, q.Name)
		}
		for _, key := range q.Keys {
			if err := ch.QueueBind(q.Name, key, t.Exchange, false, nil); err != nil {
				return earlier, fmt.Errorf("bind %s to %s: %w", q.Name, key, err)
			}
		}
		dead := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
		if _, err := ch.QueueDeclare(q.DeadQueue(), true, false, false, false, dead); err != nil {
			return earlier, fmt.Errorf("queue %s: %w", q.DeadQueue(), err)
		}
		if err := ch.QueueBind(q.DeadQueue(), q.Name, t.DeadLetterExchange, false, nil); err != nil {
			return earlier, fmt.Errorf("bind %s: %w", q.DeadQueue(), err)
		}
	}
	return earlier, nil
}

// QueueArguments are the arguments q is declared with: a quorum queue
// that dead-letters past its delivery limit (20 unless set) to the
// dead-letter exchange, routing key its own name, at least once
// (docs/asyncapi.yaml lists them for each queue).
func (t Topology) QueueArguments(q Queue) amqp.Table {
	limit := q.DeliveryLimit
	if limit <= 0 {
		limit = 20
	}
	return atLeastOnce(amqp.Table{
		amqp.QueueTypeArg:           amqp.QueueTypeQuorum,
		"x-dead-letter-exchange":    t.DeadLetterExchange,
		"x-dead-letter-routing-key": q.Name,
		"x-delivery-limit":          int64(limit),
	})
}

// atLeastOnce adds at-least-once dead-lettering to a quorum queue's
// arguments: the queue keeps a message it dead-letters (delivery limit,
// expiry) until every queue it is routed to has confirmed it, so a node
// lost on the way loses nothing (the default, at-most-once, publishes it
// without confirms). The broker requires reject-publish overflow for it;
// with no length limit set, that refuses no publish.
func atLeastOnce(args amqp.Table) amqp.Table {
	args["x-dead-letter-strategy"] = "at-least-once"
	args["x-overflow"] = "reject-publish"
	return args
}

// declareQueue declares a consumer's queue, on a channel of its own: the
// broker closes the channel of a refused declaration. A queue declared by
// a version before at-least-once dead-lettering cannot take the new
// arguments (a queue's arguments never change: PRECONDITION_FAILED,
// inequivalent arg). It is declared again as it was and reported
// (earlier), so that an upgraded service keeps consuming its messages;
// docs/operations.md ("Upgrading the queues") says how an operator gives
// it at-least-once dead-lettering (a policy).
func declareQueue(conn *amqp.Connection, name string, args amqp.Table) (earlier bool, err error) {
	ch, err := conn.Channel()
	if err != nil {
		return false, err
	}
	_, err = ch.QueueDeclare(name, true, false, false, false, args)
	if err == nil {
		return false, ch.Close()
	}
	var refused *amqp.Error
	if !errors.As(err, &refused) || refused.Code != amqp.PreconditionFailed ||
		!(strings.Contains(refused.Reason, "'x-dead-letter-strategy'") || strings.Contains(refused.Reason, "'x-overflow'")) {
		return false, err
	}
	ch, cerr := conn.Channel()
	if cerr != nil {
		return false, errors.Join(err, cerr)
	}
	defer ch.Close()
	before := amqp.Table{}
	for k, v := range args {
		if k != "x-dead-letter-strategy" && k != "x-overflow" {
			before[k] = v
		}
	}
	if _, derr := ch.QueueDeclare(name, true, false, false, false, before); derr != nil {
		return false, fmt.Errorf("%w; declared as before at-least-once dead-lettering: %w", err, derr)
	}
	return true, nil
}

// declareRetryQueue declares the holding queue of one retry tier: a quorum
// queue (replicated like the queue it feeds) with per-message expiry that
// dead-letters a message back to that queue at least once. A delayed
// retry lives only here after its original was acked, so losing it to one
// node's loss would lose the event.
func declareRetryQueue(ch *amqp.Channel, queue string, tier int) (string, error) {
	name := RetryQueue(queue, tier)
	args := atLeastOnce(amqp.Table{
		amqp.QueueTypeArg:           amqp.QueueTypeQuorum,
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": queue,
	})
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
