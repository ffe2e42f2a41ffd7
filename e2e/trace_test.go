package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/sagatest"
	"github.com/relmsg/ordersaga/pkg/tracing"
)

// One order can be followed across the three services by its trace id: the
// traceparent of the HTTP request goes into every outbox row the saga
// writes, into every message header, and into every consumer's log lines.
func TestTraceparentFollowsTheOrderAcrossServices(t *testing.T) {
	t.Parallel()
	s := sagatest.Start(t)
	parent := tracing.New()
	traceID := tracing.TraceID(parent)
	var o orderJSON
	body := map[string]any{"customer_id": "c-trace", "items": []map[string]any{{"sku": "SKU-1", "quantity": 1}}}
	if code := s.Order.Do("POST", "/orders", map[string]string{"Idempotency-Key": "trace-1", "traceparent": parent}, body, &o); code != 202 {
		t.Fatalf("POST /orders: %d", code)
	}
	waitStatus(t, s, o.OrderID, "confirmed")
	sagatest.Eventually(t, 10*time.Second, "every service's outbox rows to be written", func() bool {
		var n int
		s.Payment.DB.Get(&n, `SELECT COUNT(*) FROM outbox_events WHERE aggregate_id = ?`, o.OrderID)
		return n == 2
	})
	for _, svc := range []*sagatest.Service{s.Order, s.Inventory, s.Payment} {
		var tps []*string
		if err := svc.DB.Select(&tps, `SELECT traceparent FROM outbox_events WHERE aggregate_id = ?`, o.OrderID); err != nil {
			t.Fatal(err)
		}
		if len(tps) == 0 {
			t.Fatalf("%s wrote no outbox rows for order %s", svc.Name, o.OrderID)
		}
		for _, tp := range tps {
			if tp == nil || tracing.TraceID(*tp) != traceID {
				t.Errorf("%s outbox row has traceparent %v, want trace %s", svc.Name, tp, traceID)
			}
		}
		if !strings.Contains(svc.Logs(), `"trace_id":"`+traceID+`"`) {
			t.Errorf("%s never logged trace_id %s", svc.Name, traceID)
		}
	}
}
