package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/sagatest"
)

// SIGTERM during load loses nothing. Inventory and order run as real
// processes; while orders stream in, each gets SIGTERM (it stops taking
// work, finishes in-flight messages and the dispatcher's batch, then exits
// 0 within its shutdown timeout) and is started again. Clients retry their
// POST with the same Idempotency-Key while the order service is down.
// Every order must end confirmed, once, with one charge and the stock taken
// exactly once.
func TestSIGTERMDuringLoadLosesNothing(t *testing.T) {
	t.Parallel()
	s := sagatest.Start(t)
	before := stock(t, s, "SKU-2")
	inv := s.Inventory
	inv.Stop()
	invProc := inv.StartProcess(nil)
	ord := s.Order
	ord.Stop()
	ordProc := ord.StartProcess(nil)

	const n = 120
	ids, accepted, wg := placeWithRetries(t, ord, n)
	stopAndTime := func(name string, p *sagatest.Process) time.Duration {
		start := time.Now()
		if err := p.Stop(); err != nil {
			t.Fatalf("%s did not shut down cleanly on SIGTERM: %v", name, err)
		}
		return time.Since(start)
	}
	time.Sleep(500 * time.Millisecond)
	took := stopAndTime("inventory", invProc)
	t.Logf("inventory stopped on SIGTERM in %v under load (accepted so far: %d)", took, accepted.Load())
	inv.StartProcess(nil)
	time.Sleep(400 * time.Millisecond)
	took = stopAndTime("order", ordProc)
	t.Logf("order stopped on SIGTERM in %v under load (accepted so far: %d)", took, accepted.Load())
	ord.StartProcess(nil)
	wg.Wait()
	if t.Failed() {
		return
	}

	waitAllConfirmed(t, ord, ids)
	sagatest.Eventually(t, 30*time.Second, "inventory to commit every sale", func() bool {
		return stock(t, s, "SKU-2").Reserved == before.Reserved
	})
	after := stock(t, s, "SKU-2")
	if after.OnHand != before.OnHand-n {
		t.Fatalf("on_hand %d -> %d, want exactly %d taken", before.OnHand, after.OnHand, n)
	}
	var orders, charges, dead int
	s.Order.DB.Get(&orders, `SELECT COUNT(*) FROM orders`)
	s.Payment.DB.Get(&charges, `SELECT COUNT(*) FROM psp_charges`)
	for _, svc := range []*sagatest.Service{s.Order, s.Inventory, s.Payment} {
		var d int
		svc.DB.Get(&d, `SELECT COUNT(*) FROM dead_letters`)
		dead += d
	}
	if orders != n || charges != n || dead != 0 {
		t.Fatalf("orders=%d charges=%d dead letters=%d, want %d, %d and 0", orders, charges, dead, n, n)
	}
}

// placeWithRetries places n orders of one SKU-2 over about 1.8 s, each
// client retrying its POST with its Idempotency-Key while the order service
// is down. The ids fill in as orders are accepted; wait on wg for all.
func placeWithRetries(t *testing.T, ord *sagatest.Service, n int) ([]string, *atomic.Int32, *sync.WaitGroup) {
	t.Helper()
	accepted := &atomic.Int32{}
	ids := make([]string, n)
	wg := &sync.WaitGroup{}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 15 * time.Millisecond) // about 1.8 s of load
			key := fmt.Sprintf("sigterm-%d", i)
			body := map[string]any{"customer_id": "c-load", "items": []map[string]any{{"sku": "SKU-2", "quantity": 1}}}
			for attempt := 0; attempt < 400; attempt++ {
				var o orderJSON
				if code, err := ord.TryDo("POST", "/orders", map[string]string{"Idempotency-Key": key}, body, &o); err == nil && code == 202 {
					ids[i] = o.OrderID
					accepted.Add(1)
					return
				}
				time.Sleep(50 * time.Millisecond) // the order service is restarting
			}
			t.Errorf("order %d was never accepted", i)
		}()
	}
	return ids, accepted, wg
}

// waitAllConfirmed waits up to 90 s for every order to be confirmed.
func waitAllConfirmed(t *testing.T, ord *sagatest.Service, ids []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for i, id := range ids {
		var o orderJSON
		for {
			ord.Do("GET", "/orders/"+id, nil, nil, &o)
			if o.Status == "confirmed" {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("order %d (%s) is %s after the restarts: lost work", i, id, o.Status)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
