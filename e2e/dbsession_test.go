package e2e

import (
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/sagatest"
)

// killTransactionSession kills, from a root connection, the database session
// that holds an open transaction in the service's schema: what a DBA's KILL,
// a failover or a network cut does to a request in flight.
func killTransactionSession(t *testing.T, svc *sagatest.Service) {
	t.Helper()
	// The one that has written rows: the service's own loops (the
	// dispatcher's claim, the sweeps) open short transactions of their own,
	// and on a loaded machine one of them showed beside the request's.
	const q = `SELECT t.trx_mysql_thread_id FROM information_schema.INNODB_TRX t
JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id WHERE p.DB = ? AND t.trx_rows_modified > 0`
	// INNODB_TRX is a snapshot the server refreshes at most every 100 ms:
	// ask until the paused transaction shows.
	var ids []int64
	sagatest.Eventually(t, 10*time.Second, "the request's transaction to show in INNODB_TRX", func() bool {
		ids = nil
		if err := svc.DB.Select(&ids, q, svc.DB.Name); err != nil {
			t.Fatal(err)
		}
		return len(ids) > 0
	})
	if len(ids) != 1 {
		t.Fatalf("%d sessions hold a transaction in %s, want the one request's", len(ids), svc.DB.Name)
	}
	if _, err := svc.DB.Exec("KILL CONNECTION ?", ids[0]); err != nil {
		t.Fatal(err)
	}
}

// The database session of POST /orders is killed while its transaction is
// open (the order row inserted, its event not yet): the transaction fails
// on the broken connection before COMMIT, the service retries it on a new
// connection, and the client gets its 202. One order, one order.created,
// and the saga completes.
func TestCreateSurvivesAKilledDatabaseSession(t *testing.T) {
	t.Parallel()
	s := sagatest.Start(t)
	gate := s.Order.Failpoints.Pause("order.create.after-order-insert", 1)
	type answer struct {
		code int
		o    orderJSON
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		var a answer
		body := map[string]any{"customer_id": "c-1", "items": []map[string]any{{"sku": "SKU-1", "quantity": 1}}}
		a.code, a.err = s.Order.TryDo("POST", "/orders", map[string]string{"Idempotency-Key": "killed-1"}, body, &a.o)
		done <- a
	}()
	select {
	case <-gate.Reached():
	case <-time.After(30 * time.Second):
		t.Fatal("the create never reached its transaction")
	}
	killTransactionSession(t, s.Order)
	gate.Release()
	var a answer
	select {
	case a = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("no answer to POST /orders")
	}
	if a.err != nil || a.code != 202 || a.o.Status != "pending_inventory" || a.o.OrderID == "" {
		t.Fatalf("POST /orders with its session killed: %d %+v %v, want 202 pending_inventory", a.code, a.o, a.err)
	}
	waitStatus(t, s, a.o.OrderID, "confirmed")
	var orders, created int
	if err := s.Order.DB.Get(&orders, "SELECT COUNT(*) FROM orders"); err != nil {
		t.Fatal(err)
	}
	if err := s.Order.DB.Get(&created, "SELECT COUNT(*) FROM outbox_events WHERE event_type = 'order.created'"); err != nil {
		t.Fatal(err)
	}
	if orders != 1 || created != 1 || len(charges(t, s, a.o.OrderID).Charges) != 1 {
		t.Fatalf("%d orders, %d order.created events, %d charges: want one of each", orders, created, len(charges(t, s, a.o.OrderID).Charges))
	}
}
