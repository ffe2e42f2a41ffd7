package sagatest

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/wire"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// TestAStackLeavesNoQueue: when a test's stack is done, nothing of its
// namespace is left on the machine's broker. Start's cleanup deletes the
// services' queues by name over AMQP (ordersvc.Topology and the others):
// the consumers' queues, their dead-letter queues and the retry tiers a
// failed delivery declares on the fly. A queue the services declare that
// those names miss would stay on the broker after every test: this lists
// what the broker has (one rabbitmqctl) after a stack that made an order,
// with a failed delivery on the way, has been cleaned up.
func TestAStackLeavesNoQueue(t *testing.T) {
	t.Parallel()
	var ns rabbit.Namespace
	t.Run("a stack with an order and a retried delivery", func(t *testing.T) {
		s := Start(t)
		ns = s.NS
		// The first event inventory takes fails once: its consumer sends it
		// to a retry tier, a queue declared only then.
		s.Inventory.Failpoints.Error("inbox.after-claim", 1)
		var o wire.Order
		body := map[string]any{"customer_id": "c-1", "items": []map[string]any{{"sku": "SKU-1", "quantity": 1}}}
		if code := s.Order.Do("POST", "/orders", map[string]string{"Idempotency-Key": "leaves-no-queue"}, body, &o); code != 202 {
			t.Fatalf("POST /orders: %d", code)
		}
		Eventually(t, 30*time.Second, "order "+o.OrderID+" confirmed", func() bool {
			var got wire.Order
			s.Order.Do("GET", "/orders/"+o.OrderID, nil, nil, &got)
			return got.Status == "confirmed"
		})
		queues := queuesIn(t, ns)
		if !hasRetryTier(queues) || len(queues) < 4 {
			t.Fatalf("the stack's queues while it runs: %v; want the consumers' queues and a retry tier", queues)
		}
		t.Logf("while the stack runs: %d queues of its namespace", len(queues))
	})
	if left := queuesIn(t, ns); len(left) > 0 {
		t.Errorf("left on the broker after the stack's cleanup: %v", left)
	}
}

// queuesIn lists the broker's queues whose names start with ns.
func queuesIn(t *testing.T, ns rabbit.Namespace) []string {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "-q", "list_queues", "name").CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl list_queues: %v\n%s", err, out)
	}
	var names []string
	for _, name := range strings.Fields(string(out)) {
		if strings.HasPrefix(name, string(ns)) {
			names = append(names, name)
		}
	}
	return names
}

func hasRetryTier(queues []string) bool {
	for _, q := range queues {
		if strings.Contains(q, ".delay.") {
			return true
		}
	}
	return false
}
