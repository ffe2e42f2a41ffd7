package orderapp_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/pkg/instance"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderapp"
	"github.com/relmsg/ordersaga/services/order/internal/peerclient"
)

// Two instances of the order service (two Apps on one schema) run the
// reconciler at once. The first takes the database lease and is held
// before its repair; the second's scheduled run skips, and an operator's
// run on it waits for the lease, then finds the order repaired. One audit
// row, written by the first instance; one repair in the order's history.
func TestReconcilerLeaseOneInstanceRuns(t *testing.T) {
	t.Parallel()
	r := newRecon(t)
	o := r.awaitingPayment(t, "two-instances")
	r.age(t, o.ID, 5*time.Minute)
	r.inventory.set(o.ID, reservation(order.ResReserved))
	r.payment.set(o.ID, payment(order.PaySucceeded))
	second := orderapp.New(r.db, func() {}, quiet, orderapp.Config{
		Deadlines: order.Deadlines{Participant: time.Hour, Payment: time.Hour},
		Reconcile: orderapp.ReconcileConfig{Grace: time.Minute, RefundGrace: time.Minute, Batch: 50},
		Peers:     peerclient.New(r.inventory.srv.URL, r.payment.srv.URL, adminToken, 2*time.Second),
	})

	gate, first := r.runPaused(t, instance.With(context.Background(), "order-1"), "schedule")
	ctx2 := instance.With(context.Background(), "order-2")
	// The first holds the lease: the second's scheduled run skips.
	if sum, err := second.Reconcile(ctx2, "schedule"); !errors.Is(err, orderapp.ErrReconcilerBusy) || sum.Checked != 0 {
		t.Fatalf("second instance's scheduled run: checked %d, err %v; want skipped with ErrReconcilerBusy", sum.Checked, err)
	}
	// An operator's run on the second waits for the lease.
	op := make(chan runResult, 1)
	go func() {
		sum, err := second.Reconcile(ctx2, "admin")
		op <- runResult{sum, err}
	}()
	gate.Release()
	res := <-first
	if res.err != nil || len(res.sum.Repairs) != 1 || res.sum.Repairs[0].Outcome != orderapp.OutcomeRepaired {
		t.Fatalf("first instance: %+v, %v; want one repair", res.sum, res.err)
	}
	res2 := <-op
	if res2.err != nil {
		t.Fatalf("operator's run on the second instance: %v", res2.err)
	}
	if len(res2.sum.Repairs) != 0 {
		t.Errorf("the second instance repaired again: %+v", res2.sum.Repairs)
	}

	if s := r.status(t, o.ID).Status; s != order.Confirmed {
		t.Errorf("order %s, want confirmed", s)
	}
	audits := r.audits(t, o.ID)
	if len(audits) != 1 {
		t.Fatalf("%d audit rows, want 1 (not doubled): %+v", len(audits), audits)
	}
	var by string
	if err := r.db.Get(&by, `SELECT COALESCE(instance, '') FROM reconciliation_audit WHERE order_id = ?`, o.ID); err != nil || by != "order-1" {
		t.Errorf("audit row's instance %q (%v), want order-1", by, err)
	}
	var repairs int
	if err := r.db.Get(&repairs, `SELECT COUNT(*) FROM order_history WHERE order_id = ? AND actor = ? AND instance = 'order-1'`,
		o.ID, orderapp.ActorReconciler); err != nil || repairs != 1 {
		t.Errorf("reconciler changes by order-1 in the history: %d (%v), want 1", repairs, err)
	}
}
