package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/internal/benchtest"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

// BenchmarkSagaCeiling is the saga's physical ceiling on this machine: the
// round trips one confirmed order cannot do without, with no service code
// (-benchtime 6000x: orders). Per order, as in the saga's happy path:
//
//   - the create: one transaction (a business row, an outbox row, COMMIT);
//   - five events published persistent with publisher confirms, each then
//     marked sent in its outbox row (one UPDATE per published batch);
//   - six deliveries from four quorum queues with manual acks, as the
//     services' bindings route them (order.created and order.confirmed to
//     inventory, inventory.reserved to order and to payment,
//     payment.charge_requested to payment's PSP queue, payment.succeeded
//     to order), each in a consumer transaction that inserts the inbox row,
//     writes the business row and, for the four that emit the next event,
//     its outbox row.
//
// It grants itself every saving the chapter allows: a consumer takes all
// the deliveries waiting (up to 16, prefetch 64) into one transaction of
// one multi-row statement per table and acks them with one multiple ack
// on its own channel; the committed events go straight to a relay (no
// claim transaction, no lease, no poll); no JSON is decoded, no HTTP
// is served and no PSP is called. The saga's own throughput divided by
// this one is the fraction of the ceiling in docs/performance.md.
func BenchmarkSagaCeiling(b *testing.B) {
	c := newCeiling(b, benchtest.EnvInt("BENCH_CEILING_WORKERS", 2))
	n := b.N
	cpu := benchtest.StartCPU()
	b.ResetTimer()
	start := time.Now()
	c.run(b, n, benchtest.EnvInt("BENCH_CEILING_CREATORS", 16))
	took := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(n)/took.Seconds(), "orders/s")
	cpu.Report(b, "")
	b.ReportMetric(float64(c.statements.Load())/float64(n), "statements/order")
	b.ReportMetric(float64(c.commits.Load())/float64(n), "commits/order")
}

// ceilingEmits is the saga's happy path: the event a consumer emits for
// an event it consumes (none for the others: order's inventory.reserved,
// inventory's order.confirmed, which ends the order).
var ceilingEmits = map[[2]string]string{
	{"inventory", events.OrderCreated}:             events.InventoryReserved,
	{"payment", events.InventoryReserved}:          events.PaymentChargeRequested,
	{"payment-psp", events.PaymentChargeRequested}: events.PaymentSucceeded,
	{"order", events.PaymentSucceeded}:             events.OrderConfirmed,
}

// ceilingService is the service whose business table a consumer writes.
var ceilingService = map[string]string{"inventory": "inventory", "order": "order", "payment": "payment", "payment-psp": "payment"}

// ceiling holds the fixture: one database with the chapter's tables and a
// business table, four quorum queues.
type ceiling struct {
	db         *sqlx.DB
	exchange   string
	queues     map[string]string // consumer -> queue
	workers    int
	relay      chan []outboxRef
	done       atomic.Int64 // orders whose last event was consumed
	statements atomic.Int64
	commits    atomic.Int64
}

// outboxRef is a committed outbox row the relay publishes and marks.
type outboxRef struct {
	id, key string
	order   uint64
}

func newCeiling(b *testing.B, workers int) *ceiling {
	b.Helper()
	db := sqldbtest.New(b, "order").DB // the chapter's outbox and inbox tables
	// As many connections as the four consumers' workers, the relays and
	// the creators use at once: none waits for the pool.
	db.SetMaxOpenConns(64)
	// One business row per service and order, as each service has its own
	// table: two consumers never write the same row.
	db.MustExec(`CREATE TABLE ceiling_rows (service VARCHAR(20) NOT NULL, id BIGINT UNSIGNED NOT NULL,
  step VARCHAR(40) NOT NULL, PRIMARY KEY (service, id)) ENGINE=InnoDB`)
	ns := rabbittest.Namespace(b)
	topo := rabbittest.Topology(b, ns,
		rabbit.Queue{Name: "inventory", Keys: []string{events.OrderCreated, events.OrderConfirmed}, DeliveryLimit: 20},
		rabbit.Queue{Name: "order", Keys: []string{events.InventoryReserved, events.PaymentSucceeded}, DeliveryLimit: 20},
		rabbit.Queue{Name: "payment", Keys: []string{events.InventoryReserved}, DeliveryLimit: 20},
		rabbit.Queue{Name: "payment-psp", Keys: []string{events.PaymentChargeRequested}, DeliveryLimit: 20})
	rabbittest.Conn(b, topo) // declares the topology
	c := &ceiling{db: db, exchange: topo.Exchange, queues: map[string]string{}, workers: workers, relay: make(chan []outboxRef, 4096)}
	for i, name := range []string{"inventory", "order", "payment", "payment-psp"} {
		c.queues[name] = topo.Queues[i].Name
	}
	return c
}

// run creates n orders from `creators` goroutines and returns when the last
// one's final event is consumed.
func (c *ceiling) run(b *testing.B, n, creators int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn := rabbittest.Dial(b)
	// Closed in the background: a channel's close can wait behind
	// deliveries the client still holds, and the figures are taken.
	defer func() { go conn.Close() }()
	errs := make(chan error, 64)
	var wg sync.WaitGroup
	spawn := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && ctx.Err() == nil {
				errs <- err
				cancel()
			}
		}()
	}
	for range 2 {
		spawn(func() error { return c.relayLoop(ctx, conn) })
	}
	for name, q := range c.queues {
		for range c.workers {
			spawn(func() error { return c.consume(ctx, conn, name, q) })
		}
	}
	var next atomic.Int64
	for range creators {
		spawn(func() error {
			for i := next.Add(1); i <= int64(n) && ctx.Err() == nil; i = next.Add(1) {
				if err := c.create(ctx, uint64(i)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for c.done.Load() < int64(n) && ctx.Err() == nil {
		time.Sleep(2 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

const (
	ceilingInsertRows = `INSERT INTO ceiling_rows (service, id, step) VALUES `
	ceilingUpsertRows = ` ON DUPLICATE KEY UPDATE step = VALUES(step)`
	ceilingInbox      = `INSERT INTO consumer_inbox (consumer_name, event_id) VALUES `
	ceilingOutbox     = `INSERT INTO outbox_events (event_id, aggregate_id, aggregate_version, event_type, payload) VALUES `
	ceilingMarkSent   = `UPDATE outbox_events SET status = 'sent', sent_at = NOW(6) WHERE event_id IN (?)`
)

// create is the order's own transaction: its row and its first event.
func (c *ceiling) create(ctx context.Context, order uint64) error {
	ref := outboxRef{id: uuid.NewString(), key: events.OrderCreated, order: order}
	err := c.tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, ceilingInsertRows+"(?, ?, ?)", "order", order, "created"); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, ceilingOutbox+"(?, ?, 1, ?, ?)", ref.id, order, ref.key, `{}`)
		return err
	}, 2)
	if err != nil {
		return fmt.Errorf("create %d: %w", order, err)
	}
	c.relay <- []outboxRef{ref}
	return nil
}

// tx runs fn in a transaction and counts BEGIN, its statements and COMMIT.
func (c *ceiling) tx(ctx context.Context, fn func(*sqlx.Tx) error, statements int) error {
	c.statements.Add(int64(statements) + 2)
	c.commits.Add(1)
	return sqldb.WithTx(ctx, c.db, fn)
}

// consume is one consumer worker on its own channel.
func (c *ceiling) consume(ctx context.Context, conn *amqp.Connection, consumer, queue string) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Qos(64, 0, false); err != nil {
		return err
	}
	in, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", queue, err)
	}
	// The client hands deliveries over one at a time through an unbuffered
	// channel: a buffered copy lets a batch see all those already here.
	dels := make(chan amqp.Delivery, 64)
	go func() {
		for d := range in {
			dels <- d
		}
	}()
	// The client's delivery goroutine must not block on a delivery nobody
	// takes any more while the channel closes (deferred Close runs after).
	defer func() {
		go func() {
			for range dels {
			}
		}()
	}()
	for {
		var batch []amqp.Delivery
		select {
		case <-ctx.Done():
			return nil
		case d := <-dels:
			batch = append(batch, d)
		}
	take:
		for len(batch) < 16 {
			select {
			case d := <-dels:
				batch = append(batch, d)
			default:
				break take
			}
		}
		if err := c.handle(ctx, consumer, batch); err != nil {
			return err
		}
		if err := batch[len(batch)-1].Ack(true); err != nil {
			return err
		}
	}
}

// handle is one consumer transaction for a batch: inbox rows, business
// rows, outbox rows of the events it emits; then the relay gets them.
func (c *ceiling) handle(ctx context.Context, consumer string, batch []amqp.Delivery) error {
	var inbox, rows, out []any
	var refs []outboxRef
	finals := 0
	for _, d := range batch {
		order, _ := strconv.ParseUint(d.CorrelationId, 10, 64)
		emits := ceilingEmits[[2]string{consumer, d.RoutingKey}]
		inbox = append(inbox, consumer, d.MessageId)
		rows = append(rows, ceilingService[consumer], order, d.RoutingKey)
		if emits != "" {
			ref := outboxRef{id: uuid.NewString(), key: emits, order: order}
			refs = append(refs, ref)
			out = append(out, ref.id, order, ref.key, `{}`)
		}
		if d.RoutingKey == events.OrderConfirmed {
			finals++
		}
	}
	statements := 2
	if len(refs) > 0 {
		statements++
	}
	err := c.tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, ceilingInbox+sqldb.Values("(?, ?)", len(batch)), inbox...); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, ceilingInsertRows+sqldb.Values("(?, ?, ?)", len(batch))+ceilingUpsertRows, rows...); err != nil {
			return err
		}
		if len(refs) == 0 {
			return nil
		}
		_, err := tx.ExecContext(ctx, ceilingOutbox+sqldb.Values("(?, ?, 1, ?, ?)", len(refs)), out...)
		return err
	}, statements)
	if err != nil {
		return fmt.Errorf("%s: %w", consumer, err)
	}
	if len(refs) > 0 {
		c.relay <- refs
	}
	c.done.Add(int64(finals))
	return nil
}

// relayLoop publishes what the relay channel holds, all of it at once
// (up to 500), awaits the confirms and marks the rows sent.
func (c *ceiling) relayLoop(ctx context.Context, conn *amqp.Connection) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	for {
		var refs []outboxRef
		select {
		case <-ctx.Done():
			return nil
		case r := <-c.relay:
			refs = r
		}
	more:
		for len(refs) < 500 {
			select {
			case r := <-c.relay:
				refs = append(refs, r...)
			default:
				break more
			}
		}
		if err := c.publish(ctx, ch, refs); err != nil {
			return err
		}
	}
}

// publish sends refs persistent and mandatory, then waits for every confirm
// and marks them sent.
func (c *ceiling) publish(ctx context.Context, ch *amqp.Channel, refs []outboxRef) error {
	confs := make([]*amqp.DeferredConfirmation, len(refs))
	ids := make([]string, len(refs))
	for i, r := range refs {
		conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, c.exchange, r.key, true, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, MessageId: r.id, CorrelationId: strconv.FormatUint(r.order, 10),
			ContentType: "application/json", Body: []byte(`{}`),
		})
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		confs[i], ids[i] = conf, r.id
	}
	for _, conf := range confs {
		ok, err := conf.WaitContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("publish: nacked")
		}
	}
	q, args, err := sqlx.In(ceilingMarkSent, ids)
	if err != nil {
		return err
	}
	c.statements.Add(1)
	_, err = c.db.ExecContext(ctx, q, args...)
	return err
}
