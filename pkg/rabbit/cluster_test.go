package rabbit_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/internal/rabbitnode"
	"github.com/relmsg/ordersaga/internal/rabbitnode/rabbitnodetest"
	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

// On a three-node cluster an event fails once and waits in its retry tier,
// its original acked: the tier is then its only copy. The node leading the
// tier (usually the consumer's node too: a quorum queue's leader starts
// where it was declared) is killed and its data directory removed. The tier is a quorum queue, so the two other nodes
// still hold the event; it expires there, is dead-lettered back to its
// queue at least once, and the inbox consumer, moved to another node,
// applies it exactly once.
func TestRetryOutlivesTheNodeHoldingIt(t *testing.T) {
	t.Parallel()
	nodes := rabbitnodetest.Cluster(t, "rtretry", 3)
	db := sqldbtest.New(t, "order")
	// The event's effect: a second application would add a second row.
	if _, err := db.Exec(`CREATE TABLE applied (event_id CHAR(36) NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	ns := rabbittest.Namespace(t)
	queue := ns.Queue("probe.events")
	topo := rabbit.Topology{Exchange: ns.Exchange(), DeadLetterExchange: ns.DeadLetterExchange(),
		Queues: []rabbit.Queue{{Name: queue, Keys: []string{events.OrderCreated}}}}
	var urls []string
	for _, n := range nodes {
		urls = append(urls, n.URL())
	}
	conn := rabbit.New(strings.Join(urls, ","), topo, quiet)
	ctx, cancel := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	t.Cleanup(func() { cancel(); loops.Wait() })
	loops.Go(func() { _ = conn.Run(ctx) })

	var killed atomic.Bool
	consumer := failingOnce(db.DB)
	type delivery struct {
		attempt      int
		afterTheKill bool
	}
	var mu sync.Mutex
	var got []delivery
	loops.Go(func() {
		_ = conn.Consume(ctx, rabbit.ConsumeConfig{Queue: queue, Workers: 1, Log: quiet}, func(ctx context.Context, d rabbit.Delivery) rabbit.Decision {
			mu.Lock()
			got = append(got, delivery{d.Attempt, killed.Load()})
			mu.Unlock()
			return consumer.Handle(ctx, d)
		})
	})
	testutil.WaitFor(t, 30*time.Second, "the connection", conn.Connected)
	pub := conn.NewPublisher()
	defer pub.Close()
	e := events.Envelope{EventID: "3f2b8c1e-6d2a-4b7f-9c55-0e1d2a3b4c5d", Type: events.OrderCreated,
		AggregateID: 1, AggregateVersion: 1, SchemaVersion: 1, Payload: []byte(`{}`)}
	if err := pub.Publish(ctx, []rabbit.Message{rabbit.FromEnvelope(topo.Exchange, e)}, 10*time.Second)[0]; err != nil {
		t.Fatal(err)
	}

	tier := waitForRetry(t, nodes[0], queue)
	victim := nodeNamed(t, nodes, tier.Leader)
	consumerOn := conn.Address()
	alive := killWithItsData(t, nodes, victim)
	killed.Store(true)
	t.Logf("killed %s, which led %s (the consumer was on %s), and removed its data", victim.Name(), tier.Name, consumerOn)

	waitAppliedAndDrained(t, db.DB, alive, ns, e.EventID)
	var n int
	if err := db.Get(&n, `SELECT COUNT(*) FROM applied WHERE event_id = ?`, e.EventID); err != nil || n != 1 {
		t.Errorf("the event was applied %d times (%v), want once", n, err)
	}
	mu.Lock()
	defer mu.Unlock()
	// The first delivery, then the retry's from the tier after the kill
	// (at-least-once dead-lettering may bring it twice: the inbox applies
	// it once, as checked above); none from the tier before the kill, or
	// the kill took nothing from it.
	if len(got) < 2 || got[0] != (delivery{1, false}) || slices.ContainsFunc(got[1:], func(d delivery) bool {
		return d != delivery{2, true}
	}) {
		t.Errorf("deliveries %+v, want the first one, then the retry tier's only after the kill", got)
	}
}

// waitAppliedAndDrained waits until the event is applied (its row in
// "applied") and no queue of ns holds a message any more, as the node
// alive sees them.
func waitAppliedAndDrained(t *testing.T, db *sqlx.DB, alive *rabbitnode.Node, ns rabbit.Namespace, eventID string) {
	t.Helper()
	testutil.WaitForErr(t, 90*time.Second, "the event applied and nothing left on the broker", func() (bool, error) {
		var n int
		if err := db.Get(&n, `SELECT COUNT(*) FROM applied WHERE event_id = ?`, eventID); err != nil || n == 0 {
			return false, err
		}
		qs, err := alive.QuorumQueues(context.Background())
		for _, q := range qs {
			if strings.HasPrefix(q.Name, string(ns)) && q.Messages > 0 {
				return false, err
			}
		}
		return err == nil, err
	})
}

// failingOnce is an inbox consumer named "probe" whose handler fails
// (transient) the first time, then applies the event: a row in the test's
// table "applied". Its retries wait 10 to 20 s in their tier, time enough
// to find and kill the tier's leader on a busy machine.
func failingOnce(db *sqlx.DB) *inbox.Consumer {
	var failed atomic.Bool
	return inbox.NewConsumer(inbox.Config{Name: "probe", DB: db, Log: quiet,
		Backoff: retry.Backoff{Base: 20 * time.Second, Cap: 20 * time.Second},
		Handlers: map[events.Type]inbox.Handler{events.OrderCreated: func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
			if !failed.Swap(true) {
				return errors.New("simulated transient failure")
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO applied (event_id) VALUES (?)`, e.EventID)
			return err
		}}})
}

// killWithItsData SIGKILLs victim, removes its data directory and returns
// another node of the cluster.
func killWithItsData(t *testing.T, nodes []*rabbitnode.Node, victim *rabbitnode.Node) *rabbitnode.Node {
	t.Helper()
	if err := syscall.Kill(victim.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the killed node's VM gone", func() bool { return !victim.Alive() })
	if err := os.RemoveAll(filepath.Join(victim.Dir(), "mnesia")); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n != victim {
			return n
		}
	}
	t.Fatal("a cluster of one node")
	return nil
}

// waitForRetry waits until a message waits in one of queue's retry tiers
// and nothing is left in queue (the original was acked), and returns that
// tier, as node sees it.
func waitForRetry(t *testing.T, node *rabbitnode.Node, queue string) rabbitnode.QuorumQueue {
	t.Helper()
	var tier rabbitnode.QuorumQueue
	testutil.WaitForErr(t, 30*time.Second, "the event in a retry tier of "+queue+" only", func() (bool, error) {
		qs, err := node.QuorumQueues(context.Background())
		if err != nil {
			return false, err
		}
		acked := false
		tier = rabbitnode.QuorumQueue{}
		for _, q := range qs {
			switch {
			case q.Name == queue:
				acked = q.Messages == 0
			case strings.HasPrefix(q.Name, queue+".delay.") && q.Messages == 1 && q.Leader != "":
				tier = q
			}
		}
		return acked && tier.Name != "", nil
	})
	return tier
}

// nodeNamed is the node called name ("name@host").
func nodeNamed(t *testing.T, nodes []*rabbitnode.Node, name string) *rabbitnode.Node {
	t.Helper()
	for _, n := range nodes {
		if n.Name() == name {
			return n
		}
	}
	t.Fatalf("no node named %q", name)
	return nil
}
