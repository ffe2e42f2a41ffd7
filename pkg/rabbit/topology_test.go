package rabbit_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

// An upgrade on a running system: a queue declared by the version before
// at-least-once dead-lettering, holding a message, cannot take the new
// arguments (the broker refuses to change them). The service still
// connects, says in its log which queue keeps the old arguments, and
// consumes the message. A fresh queue and its retry tiers get the new
// arguments: quorum, at-least-once dead-lettering, reject-publish.
func TestUpgradeKeepsAQueueOfAnEarlierVersion(t *testing.T) {
	t.Parallel()
	ns := rabbittest.Namespace(t)
	topo := rabbittest.Topology(t, ns,
		rabbit.Queue{Name: "old.events", Keys: []string{events.OrderCreated}},
		rabbit.Queue{Name: "new.events", Keys: []string{events.OrderConfirmed}})
	oldQ, newQ := topo.Queues[0].Name, topo.Queues[1].Name
	raw := rabbittest.Dial(t)
	defer raw.Close()
	ch, err := raw.Channel()
	if err != nil {
		t.Fatal(err)
	}
	earlier := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum, "x-dead-letter-exchange": topo.DeadLetterExchange,
		"x-dead-letter-routing-key": oldQ, "x-delivery-limit": int64(20)}
	if _, err := ch.QueueDeclare(oldQ, true, false, false, false, earlier); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(context.Background(), "", oldQ, false, false, amqp.Publishing{MessageId: "waiting"}); err != nil {
		t.Fatal(err)
	}

	var logs testutil.SyncBuffer
	conn := rabbit.New(rabbittest.URL(), topo, slog.New(slog.NewTextHandler(&logs, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	t.Cleanup(func() { cancel(); loops.Wait() })
	loops.Go(func() { _ = conn.Run(ctx) })
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	defer wcancel()
	if err := conn.WaitConnected(wctx); err != nil {
		t.Fatalf("no connection with a queue of an earlier version: %v\n%s", err, logs.String())
	}
	if log := logs.String(); !strings.Contains(log, "queue declared by an earlier version") || !strings.Contains(log, "queue="+oldQ) {
		t.Errorf("the log does not name the queue kept as it was:\n%s", log)
	}

	var mu sync.Mutex
	got := map[string]int{} // message id -> deliveries
	for _, q := range []string{oldQ, newQ} {
		loops.Go(func() {
			_ = conn.Consume(ctx, rabbit.ConsumeConfig{Queue: q, Log: quiet}, func(_ context.Context, d rabbit.Delivery) rabbit.Decision {
				mu.Lock()
				defer mu.Unlock()
				if got[d.MessageId]++; d.Attempt == 1 && q == newQ {
					return rabbit.RetryAfter(time.Millisecond, "through a retry tier")
				}
				return rabbit.Ack()
			})
		})
	}
	pub := conn.NewPublisher()
	defer pub.Close()
	msg := rabbit.FromEnvelope(ns.Exchange(), events.Envelope{EventID: "5b8f0c8e-3c55-4d0e-9b5a-2f6f1f0b7c21",
		Type: events.OrderConfirmed, AggregateID: 1, AggregateVersion: 1, SchemaVersion: 1, Payload: []byte(`{}`)})
	if err := pub.Publish(ctx, []rabbit.Message{msg}, 5*time.Second)[0]; err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 15*time.Second, "the waiting message consumed and the new one back from its retry", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got["waiting"] == 1 && got[msg.Publishing.MessageId] == 2
	})

	args := queueArguments(t)
	want := map[string]string{"x-queue-type": "quorum", "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}
	for _, q := range []string{newQ, rabbit.RetryQueue(newQ, 0)} {
		for k, v := range want {
			if args[q][k] != v {
				t.Errorf("queue %s: %s = %q, want %q (arguments %v)", q, k, args[q][k], v, args[q])
			}
		}
	}
	if s := args[oldQ]["x-dead-letter-strategy"]; s != "" {
		t.Errorf("queue %s of the earlier version: x-dead-letter-strategy %q, want it kept as declared (none)", oldQ, s)
	}
}

// queueArguments is what rabbitmqctl list_queues shows of every queue's
// string arguments (queue -> argument -> value).
func queueArguments(t *testing.T) map[string]map[string]string {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "-q", "list_queues", "name", "arguments", "--formatter", "json").Output()
	if err != nil {
		t.Fatalf("rabbitmqctl list_queues: %v", err)
	}
	var rows []struct {
		Name      string  `json:"name"`
		Arguments [][]any `json:"arguments"` // [name, type, value]
	}
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("rabbitmqctl list_queues: %v\n%s", err, out)
	}
	args := map[string]map[string]string{}
	for _, r := range rows {
		args[r.Name] = map[string]string{}
		for _, a := range r.Arguments {
			if len(a) != 3 {
				continue
			}
			k, _ := a[0].(string)
			if v, ok := a[2].(string); ok {
				args[r.Name][k] = v
			}
		}
	}
	return args
}
