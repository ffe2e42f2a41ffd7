package inbox_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/deadletter"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

// The chapter's 死信不是垃圾桶 when even the dead-letter table is out of
// reach: the consumer's database account is locked (new connections
// refused, sessions killed) for longer than its attempt budget, with the
// consume loop and the drain of the broker-side dead-letter queue running
// as in a service. When the database is back, every message is applied
// once or is a recorded dead letter: none was dropped on the way.
func TestDatabaseOutageLosesNoMessage(t *testing.T) {
	t.Parallel()
	inboxtest.EachBatch(t, func(t *testing.T, batch int) {
		db := inboxtest.DB(t)
		account := inboxtest.NewAccount(t, db)
		const n, maxAttempts = 10, 3
		c := inboxtest.Made(inbox.Config{Name: "inventory", DB: account.DB, Log: quiet, MaxAttempts: maxAttempts,
			Backoff: retry.Backoff{Base: 20 * time.Millisecond, Cap: 100 * time.Millisecond}},
			inboxtest.OnCreated(inboxtest.Increment), nil)
		calls := &handled{n: map[string]int{}}
		account.Lock(t)
		b := inboxtest.ConsumeBatch(t, calls.countBatch(c.HandleBatch), 0, batch)
		b.ConsumeDead(t, calls.count(c.HandleBrokerDeadLetter))
		ids := make([]string, n)
		for i := range ids {
			e := inboxtest.Event(events.OrderCreated)
			ids[i] = e.EventID
			b.Publish(t, inboxtest.Message(e))
		}
		calls.outlast(t, ids, maxAttempts+2)
		account.Unlock(t)

		settled(t, db, "inventory", ids)
		if got := inboxtest.Effects(t, db.DB); got != countApplied(t, db, ids) {
			t.Fatalf("effects = %d, want one per applied event (%d)", got, countApplied(t, db, ids))
		}
	})
}

// The broker dead-letters a message itself when the quorum queue's
// delivery limit is reached (consumers that died before their ack, here
// simulated with nacks). The drain of <queue>.dead records it, and while
// the database refuses, it keeps the message on the broker instead of
// dropping it (<queue>.dead has no dead-letter exchange of its own).
func TestBrokerDeadLetteredMessageWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	account := inboxtest.NewAccount(t, db)
	const maxAttempts = 3
	c := inbox.NewConsumer(inbox.Config{Name: "inventory", DB: account.DB, Log: quiet, MaxAttempts: maxAttempts,
		Backoff:  retry.Backoff{Base: 20 * time.Millisecond, Cap: 100 * time.Millisecond},
		Handlers: map[events.Type]inbox.Handler{events.OrderCreated: inboxtest.Increment}})
	ns := rabbittest.Namespace(t)
	topo := rabbittest.Topology(t, ns, rabbit.Queue{Name: "inventory.order-events", Keys: []string{events.OrderCreated}, DeliveryLimit: 1})
	b := &inboxtest.Broker{NS: ns, Conn: rabbittest.Conn(t, topo), Queue: topo.Queues[0].Name}
	e := inboxtest.Event(events.OrderCreated)
	b.Publish(t, inboxtest.Message(e))
	deadQueue := rabbit.Queue{Name: b.Queue}.DeadQueue()
	raw := rabbittest.Dial(t)
	defer raw.Close()
	ch, err := raw.Channel()
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.WaitFor(t, "the broker to dead-letter the message past its delivery limit", func() bool {
		if d, ok, err := ch.Get(b.Queue, false); err != nil {
			t.Fatal(err)
		} else if ok {
			_ = d.Nack(false, true) // a consumer that died before its ack
		}
		q, err := ch.QueueDeclarePassive(deadQueue, true, false, false, false, nil)
		return err == nil && q.Messages == 1
	})

	account.Lock(t)
	calls := &handled{n: map[string]int{}}
	b.ConsumeDead(t, calls.count(c.HandleBrokerDeadLetter))
	calls.outlast(t, []string{e.EventID}, maxAttempts+2)
	account.Unlock(t)

	dl := settled(t, db, "inventory", []string{e.EventID})[e.EventID]
	if !strings.Contains(dl.Reason, "delivery_limit") || !strings.Contains(dl.Reason, b.Queue) {
		t.Fatalf("dead letter reason %q, want the broker's delivery limit on %s", dl.Reason, b.Queue)
	}
	inboxtest.WantEffects(t, db.DB, 0) // a dead letter is not applied
}

// handled counts handler calls per event, on every queue together.
type handled struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *handled) count(next rabbit.Handler) rabbit.Handler {
	return func(ctx context.Context, d rabbit.Delivery) rabbit.Decision {
		h.mu.Lock()
		h.n[d.MessageId]++
		h.mu.Unlock()
		return next(ctx, d)
	}
}

func (h *handled) countBatch(next rabbit.BatchHandler) rabbit.BatchHandler {
	return func(ctx context.Context, ds []rabbit.Delivery) []rabbit.Decision {
		h.mu.Lock()
		for _, d := range ds {
			h.n[d.MessageId]++
		}
		h.mu.Unlock()
		return next(ctx, ds)
	}
}

// outlast lets the outage go on until every event has been handled (and
// failed) at least calls times, past its attempt budget, and fails the
// test if that does not happen within 15 seconds: the give-up path (a
// dead letter the database refuses) must have been reached.
func (h *handled) outlast(t *testing.T, ids []string, calls int) {
	t.Helper()
	defer func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		var during []int
		for _, id := range ids {
			during = append(during, h.n[id])
		}
		t.Logf("handler calls per message during the outage: %v", during)
	}()
	done := func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, id := range ids {
			if h.n[id] < calls {
				return false
			}
		}
		return true
	}
	testutil.WaitFor(t, 15*time.Second, fmt.Sprintf("every message handled %d times (the attempt budget exceeded) during the outage", calls), done)
}

// settled waits until every event is applied (its inbox row) or a dead
// letter, and fails with the count of lost ones after 15 seconds. It
// returns the dead letters by event id.
func settled(t *testing.T, db *sqldbtest.DB, consumer string, ids []string) map[string]deadletter.Letter {
	t.Helper()
	var dead map[string]deadletter.Letter
	var applied int
	for end := time.Now().Add(15 * time.Second); ; {
		dead, applied = map[string]deadletter.Letter{}, 0
		for _, id := range ids {
			if dl, ok := inboxtest.DeadLetter(t, db.DB, consumer, id); ok {
				dead[id] = dl
			} else if inboxtest.InboxRows(t, db.DB, id) == 1 {
				applied++
			}
		}
		if applied+len(dead) == len(ids) {
			return dead
		}
		if time.Now().After(end) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%d of %d messages lost: %d applied, %d dead letters after the outage",
		len(ids)-applied-len(dead), len(ids), applied, len(dead))
	return nil
}

func countApplied(t *testing.T, db *sqldbtest.DB, ids []string) int {
	t.Helper()
	n := 0
	for _, id := range ids {
		n += inboxtest.InboxRows(t, db.DB, id)
	}
	return n
}
