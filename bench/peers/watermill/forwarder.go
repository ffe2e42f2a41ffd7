// Package watermillpeer sets up the best Go peer of our outbox, watermill's
// Forwarder (components/forwarder) over watermill-sql (MySQL) and
// watermill-amqp with publisher confirms, so that its drain and its failure
// behaviour can be measured next to pkg/outbox on the same database and
// broker. It is a module of its own: the product does not depend on
// watermill.
//
// How the peer works, read in the sources of the versions in go.mod:
//
//   - The write side (forwarder/publisher.go, Publisher.Publish) wraps each
//     message in a JSON envelope holding the destination topic and
//     publishes it to the forwarder topic: with watermill-sql that is one
//     multi-row INSERT into watermill_<topic> on the caller's transaction
//     (pkg/sql/publisher.go, DefaultMySQLSchema.InsertQuery in
//     pkg/sql/schema_adapter_mysql.go).
//   - The SQL subscriber (pkg/sql/subscriber.go, Subscriber.query) opens one
//     SERIALIZABLE transaction per batch, locks the consumer group's offset
//     row FOR UPDATE (DefaultMySQLOffsetsAdapter.NextOffsetQuery in
//     pkg/sql/offsets_adapter_mysql.go), selects up to SubscribeBatchSize
//     rows past it, and hands them to the handler one at a time: it sends
//     the next message only after the previous one was acked
//     (Subscriber.sendMessage). Each message also costs one
//     INSERT ... ON DUPLICATE KEY UPDATE of offset_consumed
//     (ConsumedMessageQuery). The batch ends with the offset update and
//     COMMIT.
//   - The Forwarder's handler (forwarder/forwarder.go, forwardMessage)
//     unwraps the envelope and calls the AMQP publisher's Publish with one
//     message. With ConfirmDelivery that Publish waits for the broker's
//     confirm of that one message before it returns
//     (pkg/amqp/publisher.go, publishMessage; pooledChannel.Delivered in
//     pkg/amqp/channelprovider.go): one message in flight at a time.
//   - Mandatory is passed to the broker (publishMessage), but nothing in
//     watermill-amqp registers a NotifyReturn listener, so a basic.return
//     is dropped by amqp091-go and the following ack makes the message
//     count as delivered: the handler returns nil, the subscriber acks,
//     and the row is behind the consumer group's offset (or deleted, with
//     MySQLQueueOffsetsAdapter{DeleteOnAck: true}); it is never sent again.
//     peer_test.go shows it on the real servers.
package watermillpeer

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/pkg/base/events"
)

// Topic is the forwarder topic: the outbox table is watermill_outbox and
// the consumer group's offset lives in watermill_offsets_outbox.
const Topic = "outbox"

// SQL is the pair of watermill-sql adapters both sides of the outbox use.
type SQL struct {
	Schema  wsql.SchemaAdapter
	Offsets wsql.OffsetsAdapter
}

// Documented is the MySQL setup watermill's SQL documentation
// (docs/content/pubsubs/sql.md) and its Forwarder example
// (_examples/real-world-examples/transactional-events-forwarder) use:
// DefaultMySQLSchema with DefaultMySQLOffsetsAdapter. batch is
// SubscribeBatchSize (0: its default, 100).
func Documented(batch int) SQL {
	return SQL{Schema: wsql.DefaultMySQLSchema{SubscribeBatchSize: batch}, Offsets: wsql.DefaultMySQLOffsetsAdapter{}}
}

// QueueDeleteOnAck is watermill-sql's queue schema for MySQL, which deletes
// a row once the forwarder acked it (pkg/sql/queue_schema_adapter_mysql.go,
// queue_offsets_adapter_mysql.go).
func QueueDeleteOnAck(batch int) SQL {
	return SQL{Schema: wsql.MySQLQueueSchema{SubscribeBatchSize: batch}, Offsets: wsql.MySQLQueueOffsetsAdapter{DeleteOnAck: true}}
}

// InitSchema creates the outbox table (and the offsets table, if the
// adapter has one), as the subscriber's InitializeSchema would.
func InitSchema(db *stdsql.DB, s SQL) error {
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(db),
		wsql.SubscriberConfig{SchemaAdapter: s.Schema, OffsetsAdapter: s.Offsets}, watermill.NopLogger{})
	if err != nil {
		return fmt.Errorf("init schema: %w", err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(Topic); err != nil {
		return fmt.Errorf("init schema: %w", err)
	}
	return nil
}

// Write adds events to the outbox on the caller's transaction: the
// forwarder's decorated publisher over a watermill-sql publisher bound to
// tx, one Publish (one INSERT) per event type.
func Write(tx *stdsql.Tx, s SQL, evs ...events.Envelope) error {
	sqlPub, err := wsql.NewPublisher(wsql.TxFromStdSQL(tx), wsql.PublisherConfig{SchemaAdapter: s.Schema}, watermill.NopLogger{})
	if err != nil {
		return fmt.Errorf("outbox publisher: %w", err)
	}
	pub := forwarder.NewPublisher(sqlPub, forwarder.PublisherConfig{ForwarderTopic: Topic})
	byType := map[events.Type][]*message.Message{}
	var order []events.Type
	for _, e := range evs {
		if _, ok := byType[e.Type]; !ok {
			order = append(order, e.Type)
		}
		byType[e.Type] = append(byType[e.Type], Message(e))
	}
	for _, typ := range order {
		if err := pub.Publish(typ, byType[typ]...); err != nil {
			return fmt.Errorf("outbox write %s: %w", typ, err)
		}
	}
	return nil
}

// Message is the watermill message of an event: the same body as ours
// (the payload JSON) and the same headers, as strings (watermill metadata
// are strings); the message UUID is the event id.
func Message(e events.Envelope) *message.Message {
	m := message.NewMessage(e.EventID, message.Payload(e.Payload))
	m.Metadata.Set(events.HeaderAggregateID, strconv.FormatUint(e.AggregateID, 10))
	m.Metadata.Set(events.HeaderAggregateVersion, strconv.FormatUint(e.AggregateVersion, 10))
	m.Metadata.Set(events.HeaderSchemaVersion, strconv.Itoa(e.SchemaVersion))
	m.Metadata.Set(events.HeaderCorrelationID, e.CorrelationID)
	return m
}

// NewAMQPPublisher is the broker side: watermill-amqp's durable topic
// config on our topic exchange (the watermill topic, i.e. the event type,
// is the routing key), persistent messages, with the settings its
// documentation gives (pkg/amqp/config.go, PublishConfig):
// ConfirmDelivery (wait for the broker's confirm), Mandatory, and a
// channel pool (ChannelPoolSize 0 opens and closes a channel, and puts it
// in confirm mode, on every Publish; the pool "improves performance in
// high volume systems"). One channel is enough: the Forwarder publishes
// one message at a time.
func NewAMQPPublisher(url, exchange string) (*wamqp.Publisher, error) {
	cfg := wamqp.NewDurableTopicConfig(url, exchange, "")
	cfg.Exchange.Durable = true // as declared by pkg/rabbit; the publisher re-declares it
	cfg.Publish.ConfirmDelivery = true
	cfg.Publish.Mandatory = true
	cfg.Publish.ChannelPoolSize = 1
	// The same AMQP properties as rabbit.FromEnvelope: message_id = event
	// id, JSON content.
	cfg.Marshaler = wamqp.DefaultMarshaler{PostprocessPublishing: func(p amqp.Publishing) amqp.Publishing {
		p.MessageId, _ = p.Headers[wamqp.DefaultMessageUUIDHeaderKey].(string)
		p.ContentType = "application/json"
		p.Timestamp = time.Now().UTC()
		return p
	}}
	pub, err := wamqp.NewPublisher(cfg, watermill.NopLogger{})
	if err != nil {
		return nil, fmt.Errorf("amqp publisher: %w", err)
	}
	return pub, nil
}

// NewForwarder subscribes a fresh SQL subscriber to the outbox and forwards
// to pub. poll is the subscriber's PollInterval when the outbox is empty
// (0: its default, 1 s); a batch that found rows is followed at once by
// the next.
func NewForwarder(db *stdsql.DB, s SQL, pub message.Publisher, poll time.Duration) (*forwarder.Forwarder, error) {
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(db), wsql.SubscriberConfig{
		SchemaAdapter:  s.Schema,
		OffsetsAdapter: s.Offsets,
		PollInterval:   poll,
	}, watermill.NopLogger{})
	if err != nil {
		return nil, fmt.Errorf("sql subscriber: %w", err)
	}
	fwd, err := forwarder.NewForwarder(sub, pub, watermill.NopLogger{}, forwarder.Config{
		ForwarderTopic: Topic,
		CloseTimeout:   10 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("forwarder: %w", err)
	}
	return fwd, nil
}

// Start runs fwd until the returned stop is called; stop closes the
// forwarder (and its subscriber) and waits for Run to return. Calling stop
// again returns the first result.
func Start(ctx context.Context, fwd *forwarder.Forwarder) (stop func() error, err error) {
	done := make(chan error, 1)
	go func() { done <- fwd.Run(ctx) }()
	select {
	case <-fwd.Running():
	case err := <-done:
		return nil, fmt.Errorf("forwarder stopped at start: %w", err)
	}
	var once sync.Once
	var stopErr error
	return func() error {
		once.Do(func() {
			stopErr = errors.Join(fwd.Close(), <-done)
		})
		return stopErr
	}, nil
}
