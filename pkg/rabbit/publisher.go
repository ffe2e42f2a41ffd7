package rabbit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/tracing"
)

// Publish outcomes other than success. None of them means "not delivered":
// they mean "not known to be delivered", and the caller re-sends with the
// same message id.
var (
	ErrReturned       = errors.New("returned by the broker as unroutable")
	ErrNacked         = errors.New("nacked by the broker (or channel lost before the confirm)")
	ErrConfirmTimeout = errors.New("no publisher confirm before the deadline")
	ErrNotPublished   = errors.New("not published: the channel failed earlier in the batch")
)

// Publisher publishes persistent, mandatory messages on its own channel in
// confirm mode and reports, per message, whether the broker took
// responsibility for it. It is safe for concurrent use (calls are
// serialised); give each dispatcher its own Publisher for parallelism.
type Publisher struct {
	conn      *Conn
	afterSend string // failpoint between publishing a batch and awaiting its confirms

	mu      sync.Mutex
	ch      *amqp.Channel
	returns chan amqp.Return
	closed  chan *amqp.Error
}

// NewPublisher returns a publisher that opens its channel on first use.
func (c *Conn) NewPublisher(opts ...PublisherOption) *Publisher {
	p := &Publisher{conn: c}
	for _, o := range opts {
		o(p)
	}
	return p
}

// PublisherOption configures a Publisher.
type PublisherOption func(*Publisher)

// AfterSendFailpoint names a failpoint evaluated after a batch is published
// and before its confirms are awaited: the chapter's "broker has it, confirm
// lost" window.
func AfterSendFailpoint(name string) PublisherOption {
	return func(p *Publisher) { p.afterSend = name }
}

// returnBuffer must hold every return of one batch. amqp091-go drops a
// return notification when the listening Go channel stays full for 5 s, and
// a lost return would let an unroutable message count as sent. Publish also
// drains it while waiting, so it never fills.
const returnBuffer = 1024

// Message is one message to publish.
type Message struct {
	Exchange   string
	RoutingKey string
	Publishing amqp.Publishing
}

// FromEnvelope builds the message for an event: persistent, message_id =
// event id, type = event type, the contract's headers (corrects_event_id
// on a correction only), routed by its type.
func FromEnvelope(exchange string, e events.Envelope) Message {
	m := Message{
		Exchange:   exchange,
		RoutingKey: e.Type,
		Publishing: amqp.Publishing{
			MessageId:    e.EventID,
			Type:         e.Type,
			ContentType:  "application/json",
			DeliveryMode: amqp.Persistent,
			Timestamp:    e.OccurredAt,
			Headers: amqp.Table{
				events.HeaderAggregateID:      strconv.FormatUint(e.AggregateID, 10),
				events.HeaderAggregateVersion: int64(e.AggregateVersion),
				events.HeaderSchemaVersion:    int64(e.SchemaVersion),
				events.HeaderCorrelationID:    e.CorrelationID,
			},
			Body: e.Payload,
		},
	}
	if e.Traceparent != "" {
		m.Publishing.Headers[tracing.Header] = e.Traceparent
	}
	if e.CorrectsEventID != "" {
		m.Publishing.Headers[events.HeaderCorrectsEventID] = e.CorrectsEventID
	}
	return m
}

// Publish sends msgs as one pipelined batch (all published, then all
// confirms awaited) and returns one error per message: nil only when the
// broker acked it and did not return it. timeout bounds the wait for
// confirms; a message still unconfirmed then is ErrConfirmTimeout.
func (p *Publisher) Publish(ctx context.Context, msgs []Message, timeout time.Duration) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := p.ensureChannel(ctx); err != nil {
		return fill(errs, err)
	}
	dcs, err := p.send(ctx, msgs, errs)
	if err != nil {
		p.dropChannel()
		return errs
	}
	if p.afterSend != "" {
		if err := failpoint.Inject(ctx, p.afterSend); err != nil {
			// The broker may have the messages; we will never know: treat
			// every one as unconfirmed and start over on a fresh channel.
			fill(errs, fmt.Errorf("%w: %w", ErrConfirmTimeout, err))
			p.dropChannel()
			return errs
		}
	}
	returned, broken := p.awaitConfirms(ctx, dcs, errs)
	for i, dc := range dcs {
		switch {
		case errs[i] != nil:
		case !dc.Acked():
			errs[i] = ErrNacked
			broken = true
		case returned[msgs[i].Publishing.MessageId]:
			errs[i] = ErrReturned
		}
	}
	if broken {
		// A timed-out or lost confirm leaves the channel in an unknown state:
		// start the next batch on a fresh one so late acks cannot be
		// attributed to it.
		p.dropChannel()
	}
	return errs
}

// fill sets every error of errs to err and returns errs.
func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// send publishes every message of msgs, persistent and mandatory, without
// waiting, and returns their deferred confirms. When one cannot be
// published the channel is broken: its error goes in errs, every later
// message is ErrNotPublished, and send returns that error.
func (p *Publisher) send(ctx context.Context, msgs []Message, errs []error) ([]*amqp.DeferredConfirmation, error) {
	dcs := make([]*amqp.DeferredConfirmation, len(msgs))
	for i, m := range msgs {
		m.Publishing.DeliveryMode = amqp.Persistent
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, m.Exchange, m.RoutingKey, true, false, m.Publishing)
		if err != nil {
			errs[i] = fmt.Errorf("publish: %w", err)
			fill(errs[i+1:], ErrNotPublished)
			return nil, errs[i]
		}
		dcs[i] = dc
	}
	return dcs, nil
}

// awaitConfirms waits for every confirm while draining returns, until ctx
// ends: a confirm still missing then is ErrConfirmTimeout in errs, and
// broken reports that one was. returned holds the message ids the broker
// returned. RabbitMQ sends the basic.return of a message before its
// basic.ack, and the client hands them over in that order, so once a
// message is acked its return (if any) is already in p.returns.
func (p *Publisher) awaitConfirms(ctx context.Context, dcs []*amqp.DeferredConfirmation, errs []error) (returned map[string]bool, broken bool) {
	returned = map[string]bool{}
	for i, dc := range dcs {
	wait:
		for {
			select {
			case <-dc.Done():
				break wait
			case r, ok := <-p.returns:
				p.noteReturn(returned, r, ok)
			case <-ctx.Done():
				errs[i] = ErrConfirmTimeout
				broken = true
				break wait
			}
		}
	}
	for {
		select {
		case r, ok := <-p.returns:
			if p.noteReturn(returned, r, ok) {
				continue
			}
		default:
		}
		break
	}
	return returned, broken
}

// noteReturn records a return; on a closed notification channel (the AMQP
// channel died) it stops listening and reports false.
func (p *Publisher) noteReturn(returned map[string]bool, r amqp.Return, ok bool) bool {
	if !ok {
		p.returns = nil
		return false
	}
	returned[r.MessageId] = true
	return true
}

func (p *Publisher) ensureChannel(ctx context.Context) error {
	if p.ch != nil {
		select {
		case <-p.closed:
			p.ch = nil
		default:
			return nil
		}
	}
	ch, err := p.conn.Channel(ctx)
	if err != nil {
		return err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return fmt.Errorf("confirm mode: %w", err)
	}
	p.returns = ch.NotifyReturn(make(chan amqp.Return, returnBuffer))
	p.closed = ch.NotifyClose(make(chan *amqp.Error, 1))
	p.ch = ch
	return nil
}

func (p *Publisher) dropChannel() {
	if p.ch != nil {
		_ = p.ch.Close()
		p.ch = nil
	}
}

// Close closes the publisher's channel.
func (p *Publisher) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropChannel()
}
