package sagatest

import (
	"strings"
	"sync"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/internal/contract"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// A stack holds its services to the machine-readable contracts
// (docs/openapi.yaml, docs/asyncapi.yaml) while a test runs: every HTTP
// exchange of every service goes through a contract.Checker, and a queue
// bound to the stack's saga.events with "#" receives a copy of every
// message published there, each checked against its message by type and
// schema version. What does not match fails the test when it ends.
//
// WithoutContractChecks turns both checks off for one stack (benchmarks:
// they measure the services, not the checks). The setting rides in the
// order service's environment, which no service reads.
func WithoutContractChecks() Option { return WithEnv("order", contractChecksKey, "off") }

const contractChecksKey = "SAGATEST_CONTRACT_CHECKS"

// Checked reports how many HTTP exchanges and messages the stack's
// contract checks have looked at so far.
func (s *Saga) Checked() (exchanges, messages int) {
	if s.checker != nil {
		exchanges = s.checker.Checked()
	}
	if s.tap != nil {
		messages = s.tap.count()
	}
	return exchanges, messages
}

// Routable tells the stack's message tap that a test makes a routing key
// unroutable (routable false) or routable again: the tap, bound with "#",
// would otherwise route what the test means to be returned.
func (s *Saga) Routable(t testing.TB, key string, routable bool) {
	t.Helper()
	if s.tap == nil {
		return
	}
	if err := s.tap.route(key, routable); err != nil {
		t.Fatalf("contract checks: the tap's bindings: %v", err)
	}
}

// startContractChecks makes the checker and binds the tap; it registers
// the report first, so that it runs after the services have stopped.
func (s *Saga) startContractChecks(t testing.TB, amqpURL string) {
	t.Helper()
	checker, err := contract.NewChecker()
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := contract.AsyncAPI()
	if err != nil {
		t.Fatal(err)
	}
	s.checker = checker
	t.Cleanup(func() {
		var found []string
		if s.tap != nil {
			found = append(found, s.tap.close()...)
		}
		ex, msgs := s.Checked()
		t.Logf("contract: %d HTTP exchanges held to docs/openapi.yaml, %d messages to docs/asyncapi.yaml", ex, msgs)
		found = append(found, checker.Violations()...)
		for _, v := range found {
			t.Errorf("contract: %s", v)
		}
	})
	url, _, _ := strings.Cut(amqpURL, ",")
	tap, err := startTap(url, s.NS, msgs)
	if err != nil {
		t.Fatalf("contract checks: the message tap: %v", err)
	}
	s.tap = tap
}

// tap receives a copy of every message published to the stack's
// saga.events and checks it.
type tap struct {
	conn  *amqp.Connection
	ch    *amqp.Channel
	queue string
	ns    rabbit.Namespace
	msgs  *contract.Messages
	done  chan struct{}

	mu         sync.Mutex
	skip       map[string]bool // event ids the test itself published
	unrouted   map[string]bool // routing keys a test made unroutable
	violations []string
	seen       int
}

func startTap(url string, ns rabbit.Namespace, msgs *contract.Messages) (*tap, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, err
	}
	tp := &tap{conn: conn, ch: ch, queue: ns.Queue("contract.tap"), ns: ns, msgs: msgs, done: make(chan struct{}),
		skip: map[string]bool{}, unrouted: map[string]bool{}}
	// The services declare the exchange the same way when they connect.
	if err := ch.ExchangeDeclare(ns.Exchange(), amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		conn.Close()
		return nil, err
	}
	if _, err := ch.QueueDeclare(tp.queue, false, true, true, false, nil); err != nil {
		conn.Close()
		return nil, err
	}
	if err := ch.QueueBind(tp.queue, "#", ns.Exchange(), false, nil); err != nil {
		conn.Close()
		return nil, err
	}
	deliveries, err := ch.Consume(tp.queue, "contract-tap", true, true, false, false, nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	go func() {
		defer close(tp.done)
		for d := range deliveries {
			tp.check(d)
		}
	}()
	return tp, nil
}

func (tp *tap) check(d amqp.Delivery) {
	tp.mu.Lock()
	skip := tp.skip[d.MessageId]
	tp.seen++
	tp.mu.Unlock()
	if skip {
		return
	}
	if err := tp.msgs.CheckDelivery(d); err != nil {
		tp.mu.Lock()
		if len(tp.violations) < 50 {
			tp.violations = append(tp.violations, "message "+d.MessageId+" ("+d.RoutingKey+"): "+err.Error())
		}
		tp.mu.Unlock()
	}
}

// skipID tells the tap that the test itself publishes this event id (the
// lab's copies, poison and delta events): it holds the services only.
func (tp *tap) skipID(id string) {
	tp.mu.Lock()
	tp.skip[id] = true
	tp.mu.Unlock()
}

// route follows a test that makes a routing key unroutable (the lab's
// unroutable experiment) or routable again: while one is, the tap is bound
// to every other key the document knows instead of "#", so that it does
// not make the key routable itself.
func (tp *tap) route(key string, routable bool) error {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	was := len(tp.unrouted) > 0
	if routable {
		delete(tp.unrouted, key)
	} else {
		tp.unrouted[key] = true
	}
	now := len(tp.unrouted) > 0
	ex := tp.ns.Exchange()
	if was {
		for _, k := range tp.msgs.Types() {
			if err := tp.ch.QueueUnbind(tp.queue, k, ex, nil); err != nil {
				return err
			}
		}
	} else if now {
		if err := tp.ch.QueueUnbind(tp.queue, "#", ex, nil); err != nil {
			return err
		}
	}
	if !now {
		return tp.ch.QueueBind(tp.queue, "#", ex, false, nil)
	}
	for _, k := range tp.msgs.Types() {
		if !tp.unrouted[k] {
			if err := tp.ch.QueueBind(tp.queue, k, ex, false, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

func (tp *tap) count() int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.seen
}

// close stops the tap and returns what did not match.
func (tp *tap) close() []string {
	tp.conn.Close()
	<-tp.done
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.violations
}
