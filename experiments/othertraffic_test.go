package experiments

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/lab"
	"github.com/relmsg/ordersaga/internal/sagatest"
	"github.com/relmsg/ordersaga/pkg/base/events"
)

// An experiment's verdict rests on its own order and events only, so other
// traffic on the same stack cannot change it. Here other traffic flows
// through every run: copies of the events of orders made before it (what a
// load run leaves behind once the stack restarts: redeliveries the inboxes
// drop) and a warehouse restocking the experiment's own SKU. It moves
// exactly what the checks used to read: inventory's
// consumer_duplicates_suppressed_total and the SKU's on_hand. The load is
// published straight to the broker and through the stock API, so it never
// reaches a failpoint an experiment arms: failpoints are per process, not
// per order, and an order placed during a run could take its fault.
func TestExperimentVerdictsIgnoreOtherTraffic(t *testing.T) {
	t.Parallel()
	s := sagatest.Start(t, sagatest.WithEnv("order", "OUTBOX_LEASE", "3s"))
	leftovers := settledEvents(t, s, 3)
	tg := sagatest.NewTarget(t, s)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // copies of events already processed, as a load run leaves behind
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			_ = tg.Publish(ctx, leftovers[i%len(leftovers)])
			sleep(ctx, 20*time.Millisecond)
		}
	}()
	go func() { // a warehouse receiving the experiments' SKU
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			key := map[string]string{"Idempotency-Key": fmt.Sprint("warehouse-", i)} // each receipt booked once
			_, _ = s.Inventory.TryDo("POST", "/stock/SKU-2/receipts", key, map[string]int{"quantity": 1}, nil)
			sleep(ctx, 50*time.Millisecond)
		}
	}()
	defer func() { stop(); wg.Wait() }()

	for _, name := range []string{"duplicate-window", "ack-lost", "concurrent-duplicate"} {
		sc, _ := lab.Find(name)
		dups0, onHand0 := s.Inventory.Metric("consumer_duplicates_suppressed_total", "consumer", "inventory"), stock(t, s)
		l := lab.New(tg, "", nil)
		l.Patience = 60 * time.Second
		var steps []lab.Step
		l.Steps = func(st lab.Step) { steps = append(steps, st) }
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		rep := l.Run(rctx, sc, false)
		cancel()
		var b strings.Builder
		rep.Print(&b)
		t.Log(b.String())
		if !rep.Passed() {
			t.Fatalf("%s under other traffic failed:\n  %s", name, strings.Join(rep.Failures(), "\n  "))
		}
		checkSteps(t, rep, steps)
		// The other traffic was there: a check on the service-wide counter
		// (+1) or the SKU's total stock (-quantity) would have failed.
		dups1, onHand1 := s.Inventory.Metric("consumer_duplicates_suppressed_total", "consumer", "inventory"), stock(t, s)
		if dups1-dups0 < 5 || onHand1 <= onHand0 {
			t.Errorf("%s: the other traffic did not show: duplicates dropped %g -> %g, SKU-2 on_hand %d -> %d",
				name, dups0, dups1, onHand0, onHand1)
		}
	}
}

// settledEvents creates n orders, waits until each is confirmed, and
// returns the events they left in the order and inventory outboxes.
func settledEvents(t *testing.T, s *sagatest.Saga, n int) []events.Envelope {
	t.Helper()
	var out []events.Envelope
	for i := range n {
		var o lab.Order
		body := map[string]any{"customer_id": "c-other", "items": []map[string]any{{"sku": "SKU-1", "quantity": 1}}}
		if code := s.Order.Do("POST", "/orders", map[string]string{"Idempotency-Key": fmt.Sprint("other-", i)}, body, &o); code != 202 {
			t.Fatalf("create: %d", code)
		}
		sagatest.Eventually(t, 30*time.Second, "order "+o.OrderID+" confirmed", func() bool {
			var got lab.Order
			s.Order.Do("GET", "/orders/"+o.OrderID, nil, nil, &got)
			return got.Status == "confirmed"
		})
		for _, svc := range []*sagatest.Service{s.Order, s.Inventory} {
			var rows struct {
				Events []lab.OutboxRow `json:"events"`
			}
			sagatest.Eventually(t, 30*time.Second, "order "+o.OrderID+"'s events sent", func() bool {
				s := svc.Do("GET", "/admin/outbox?aggregate_id="+o.OrderID, nil, nil, &rows)
				for _, r := range rows.Events {
					if r.Status != "sent" {
						return false
					}
				}
				return s == 200 && len(rows.Events) > 0
			})
			for _, r := range rows.Events {
				out = append(out, lab.EnvelopeOf(r))
			}
		}
	}
	return out
}

// stock is SKU-2's on_hand.
func stock(t *testing.T, s *sagatest.Saga) int64 {
	t.Helper()
	var st lab.Stock
	if code := s.Inventory.Do("GET", "/stock/SKU-2", nil, nil, &st); code != 200 {
		t.Fatalf("GET /stock/SKU-2: %d", code)
	}
	return st.OnHand
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
