package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/internal/sagatest"
	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

// withPeers points the order service at the stack's inventory and payment
// (INVENTORY_URL, PAYMENT_URL): their ports are chosen when the stack
// starts, so the order service is restarted with them. env adds more order
// settings.
func withPeers(t *testing.T, s *sagatest.Saga, env map[string]string) {
	t.Helper()
	s.Order.Stop()
	s.Order.Env["INVENTORY_URL"] = s.Inventory.URL
	s.Order.Env["PAYMENT_URL"] = s.Payment.URL
	for k, v := range env {
		s.Order.Env[k] = v
	}
	s.Order.Start()
}

// startReconcilingByHand starts the stack (with opts) for a reconciler
// test, the order service with its peers: runs are asked for explicitly
// (reconcileNow), and the grace window is short so the test does not wait
// minutes.
func startReconcilingByHand(t *testing.T, opts ...sagatest.Option) *sagatest.Saga {
	t.Helper()
	s := sagatest.Start(t, opts...)
	withPeers(t, s, map[string]string{"RECONCILE": "off", "RECONCILE_GRACE": "200ms"})
	return s
}

// runJSON is the summary of a reconciliation run.
type runJSON struct {
	RunID   string         `json:"run_id"`
	Checked int            `json:"checked"`
	Closed  int            `json:"closed"`
	Found   map[string]int `json:"classifications"`
	Repairs []struct {
		RepairID       string `json:"repair_id"`
		OrderID        string `json:"order_id"`
		Classification string `json:"classification"`
		Action         string `json:"action"`
		Outcome        string `json:"outcome"`
	} `json:"repairs"`
	Errors []string `json:"errors"`
}

// reconcileNow runs a reconciliation pass (POST /admin/reconciliation/run).
func reconcileNow(t *testing.T, s *sagatest.Saga) runJSON {
	t.Helper()
	var sum runJSON
	if code := s.Order.Do("POST", "/admin/reconciliation/run", nil, nil, &sum); code != 200 {
		t.Fatalf("POST /admin/reconciliation/run: %d", code)
	}
	return sum
}

type timelineJSON struct {
	OrderID  string   `json:"order_id"`
	Status   string   `json:"status"`
	Warnings []string `json:"warnings"`
	Entries  []struct {
		At      time.Time      `json:"at"`
		Service string         `json:"service"`
		Kind    string         `json:"kind"`
		Detail  map[string]any `json:"detail"`
	} `json:"entries"`
}

// key names an entry for the assertions: service/kind plus what it is about.
func (tl timelineJSON) keys() []string {
	var out []string
	for _, e := range tl.Entries {
		k := e.Service + "/" + e.Kind
		switch e.Kind {
		case "outbox.written", "outbox.sent":
			k += ":" + fmt.Sprint(e.Detail["event_type"])
		case "inbox.processed":
			k += ":" + fmt.Sprint(e.Detail["event_type"])
		case "order.created", "order.transition":
			k += ":" + fmt.Sprint(e.Detail["to"])
		case "reservation.updated", "payment.updated":
			k += ":" + fmt.Sprint(e.Detail["status"])
		}
		out = append(out, k)
	}
	return out
}

func (tl timelineJSON) String() string {
	var sb strings.Builder
	for _, e := range tl.Entries {
		fmt.Fprintf(&sb, "  %s %-9s %-20s %v\n", e.At.Format("15:04:05.000000"), e.Service, e.Kind, e.Detail)
	}
	return sb.String()
}

func timeline(t *testing.T, s *sagatest.Saga, id string) timelineJSON {
	t.Helper()
	var tl timelineJSON
	if code := s.Order.Do("GET", "/admin/orders/"+id+"/timeline", nil, nil, &tl); code != 200 {
		t.Fatalf("GET /admin/orders/%s/timeline: %d", id, code)
	}
	return tl
}

// The timeline of a confirmed order lists every step of the saga, from all
// three services, in time order.
func TestTimelineOfAConfirmedOrder(t *testing.T) {
	t.Parallel()
	s := sagatest.Start(t)
	withPeers(t, s, nil)
	o := createOrder(t, s, "timeline-1", "c-1", "SKU-1", 2)
	waitStatus(t, s, o.OrderID, "confirmed")
	sagatest.Eventually(t, 10*time.Second, "the sale to be committed and every event sent", func() bool {
		var r reservationJSON
		s.Inventory.Do("GET", "/reservations/"+o.OrderID, nil, nil, &r)
		return r.Status == "committed" && !slices.Contains(outboxTypes(t, s.Order, o.OrderID), "order.confirmed/pending")
	})
	var tl timelineJSON
	sagatest.Eventually(t, 10*time.Second, "the timeline to show the committed sale", func() bool {
		tl = timeline(t, s, o.OrderID)
		return slices.Contains(tl.keys(), "inventory/reservation.updated:committed") &&
			slices.Contains(tl.keys(), "order/outbox.sent:order.confirmed")
	})
	if tl.OrderID != o.OrderID || tl.Status != "confirmed" || len(tl.Warnings) != 0 {
		t.Fatalf("timeline header: %s %s warnings %v", tl.OrderID, tl.Status, tl.Warnings)
	}
	for i := 1; i < len(tl.Entries); i++ {
		if tl.Entries[i].At.Before(tl.Entries[i-1].At) {
			t.Fatalf("entries out of time order at %d:\n%s", i, tl)
		}
	}

	checkOrderServiceStory(t, tl)
	checkEveryEventWrittenThenSent(t, tl)
	checkCausalChain(t, tl)
	if slices.ContainsFunc(tl.keys(), func(k string) bool { return strings.Contains(k, "reconciliation") }) {
		t.Fatalf("a healthy order has repairs:\n%s", tl)
	}
}

// checkOrderServiceStory: the order service's own entries, exactly.
func checkOrderServiceStory(t *testing.T, tl timelineJSON) {
	t.Helper()
	// The order service's own story, exactly: created and its event; the
	// reservation arrives (inbox row, then the move); the payment arrives
	// (inbox row, the move, OrderConfirmed). outbox.sent entries are left
	// out here: sent_at is when the dispatcher recorded the broker's
	// confirm, and a fast consumer may process the message before that.
	var own []string
	for i, k := range tl.keys() {
		if tl.Entries[i].Service == "order" && tl.Entries[i].Kind != "outbox.sent" {
			own = append(own, k)
		}
	}
	wantOwn := []string{
		"order/order.created:pending_inventory",
		"order/outbox.written:order.created",
		"order/inbox.processed:inventory.reserved",
		"order/order.transition:awaiting_payment",
		"order/inbox.processed:payment.succeeded",
		"order/order.transition:confirmed",
		"order/outbox.written:order.confirmed",
	}
	if !slices.Equal(own, wantOwn) {
		t.Fatalf("order service entries:\n  %s\nwant\n  %s\ntimeline:\n%s", strings.Join(own, "\n  "), strings.Join(wantOwn, "\n  "), tl)
	}
}

// checkEveryEventWrittenThenSent: every event of every service was
// written, then sent.
func checkEveryEventWrittenThenSent(t *testing.T, tl timelineJSON) {
	t.Helper()
	// Every event of every service was written, then sent.
	written := map[string]int{}
	for i, e := range tl.Entries {
		id := fmt.Sprint(e.Detail["event_id"])
		switch e.Kind {
		case "outbox.written":
			written[id] = i + 1
		case "outbox.sent":
			if written[id] == 0 {
				t.Fatalf("event %s sent before it was written:\n%s", id, tl)
			}
			written[id] = -1
		}
	}
	if len(written) != 5 {
		t.Fatalf("%d outbox rows, want 5 (order.created, inventory.reserved, payment.charge-requested, payment.succeeded, order.confirmed):\n%s", len(written), tl)
	}
	for id, state := range written {
		if state != -1 {
			t.Fatalf("event %s never sent:\n%s", id, tl)
		}
	}
}

// checkCausalChain: every step across the services, each after the one
// before it.
func checkCausalChain(t *testing.T, tl timelineJSON) {
	t.Helper()
	// Every step across the services, in causal order: each one happens
	// after the one before it.
	chain := []string{
		"order/order.created:pending_inventory",
		"order/outbox.written:order.created",
		"inventory/inbox.processed:order.created",
		"inventory/reservation.created",
		"inventory/outbox.written:inventory.reserved",
		"payment/inbox.processed:inventory.reserved",
		"payment/payment.created",
		"payment/outbox.written:payment.charge-requested",
		"payment/inbox.processed:payment.charge-requested",
		"payment/payment.updated:succeeded",
		"payment/outbox.written:payment.succeeded",
		"order/inbox.processed:payment.succeeded",
		"order/order.transition:confirmed",
		"order/outbox.written:order.confirmed",
		"inventory/inbox.processed:order.confirmed",
		"inventory/reservation.updated:committed",
	}
	keys, last := tl.keys(), -1
	for _, step := range chain {
		i := slices.Index(keys, step)
		if i < 0 {
			t.Fatalf("step %s missing from the timeline:\n%s", step, tl)
		}
		if i < last {
			t.Fatalf("step %s (entry %d) comes before the step preceding it (entry %d):\n%s", step, i, last, tl)
		}
		last = i
	}
}

// A payment result dropped on its way to the order: the PSP charged, the
// payment service recorded succeeded and sent PaymentSucceeded, but the
// message never reached the order's consumer (here: drained from its queue
// while the order service was down). The order is stuck in
// awaiting_payment with empty queues. The reconciler finds it, classifies
// it result_missing and applies PaymentSucceeded through the consumer's
// transition: confirmed + OrderConfirmed, so inventory commits the sale. It
// never calls the PSP: the charge count stays one.
func TestReconcilerRepairsADroppedPaymentResult(t *testing.T) {
	t.Parallel()
	s := startReconcilingByHand(t)
	before := stock(t, s, "SKU-1")

	o, gate := createHeld(t, s, "payment.charge.after-psp-before-record", "dropped-1", "SKU-1", 2)
	waitStatus(t, s, o.OrderID, "awaiting_payment")

	resultDroppedOnItsWayToTheOrder(t, s, o.OrderID, gate)
	s.Order.Start()
	time.Sleep(300 * time.Millisecond) // past the grace window; nothing else is on its way
	if got := waitStatus(t, s, o.OrderID, "awaiting_payment"); got.Status != "awaiting_payment" {
		t.Fatal(got.Status)
	}
	var p paymentJSON
	s.Payment.Do("GET", "/payments/"+o.OrderID, nil, nil, &p)
	if p.Status != "succeeded" || len(charges(t, s, o.OrderID).Charges) != 1 {
		t.Fatalf("payment %+v, want succeeded with one charge", p)
	}

	sum := reconcileNow(t, s)
	if sum.Checked != 1 || len(sum.Repairs) != 1 || len(sum.Errors) != 0 {
		t.Fatalf("run summary = %+v, want one order checked and repaired", sum)
	}
	rep := sum.Repairs[0]
	if rep.OrderID != o.OrderID || rep.Classification != "result_missing" || rep.Action != "apply_result" || rep.Outcome != "repaired" {
		t.Fatalf("repair = %+v", rep)
	}

	// The saga closes as if the event had arrived: confirmed, the sale
	// committed, one charge.
	waitStatus(t, s, o.OrderID, "confirmed")
	waitReservation(t, s, o.OrderID, "committed")
	if after := stock(t, s, "SKU-1"); after.OnHand != before.OnHand-2 || after.Reserved != 0 {
		t.Fatalf("stock %+v, want on_hand %d and nothing reserved", after, before.OnHand-2)
	}
	if c := charges(t, s, o.OrderID); len(c.Charges) != 1 || c.Charges[0].Status != "succeeded" {
		t.Fatalf("PSP charges = %+v, want the one charge (the reconciler never charges)", c.Charges)
	}

	checkResultMissingRepairShows(t, s, o.OrderID, rep.RepairID)

	// A second run repairs nothing: the order, finished now, is at most
	// compared once more and found consistent.
	sum = reconcileNow(t, s)
	if len(sum.Repairs) != 0 || sum.Found["consistent"] != sum.Checked {
		t.Fatalf("second run = %+v", sum)
	}
}

// resultDroppedOnItsWayToTheOrder: the order service goes away, the held
// payment is recorded and its result published while nobody consumes the
// order's queue, then the message is drained (the order service stays
// down; the caller starts it).
func resultDroppedOnItsWayToTheOrder(t *testing.T, s *sagatest.Saga, orderID string, gate *failpoint.Gate) {
	t.Helper()
	s.Order.Stop()
	gate.Release()
	sagatest.Eventually(t, 30*time.Second, "payment.succeeded to be sent", func() bool {
		return slices.Contains(outboxTypes(t, s.Payment, orderID), "payment.succeeded/sent")
	})
	dropped := rabbittest.Drain(t, s.NS.Queue("order.saga-results"), 1, 10*time.Second)
	if len(dropped) != 1 || dropped[0].Type != events.PaymentSucceeded {
		t.Fatalf("drained %d messages from the order's queue, want the one payment.succeeded", len(dropped))
	}
}

// checkResultMissingRepairShows: the reconciliation report has the audit
// row with what each service said, the metrics count the difference and
// the repair, and the timeline shows the repair and the reconciler's move
// (not the dropped event).
func checkResultMissingRepairShows(t *testing.T, s *sagatest.Saga, orderID, repairID string) {
	t.Helper()
	// The report: the audit row with what each service said.
	var report struct {
		Repairs []struct {
			RepairID       string          `json:"repair_id"`
			Classification string          `json:"classification"`
			Outcome        string          `json:"outcome"`
			Evidence       json.RawMessage `json:"evidence"`
		} `json:"repairs"`
	}
	s.Order.Do("GET", "/admin/reconciliation?order_id="+orderID, nil, nil, &report)
	if len(report.Repairs) != 1 || report.Repairs[0].RepairID != repairID {
		t.Fatalf("report = %+v", report)
	}
	ev := string(report.Repairs[0].Evidence)
	for _, want := range []string{`"payment"`, `"succeeded"`, `"inventory_reservation"`, `"reserved"`, `"answered_at"`, `"order_outbox"`} {
		if !strings.Contains(ev, want) {
			t.Fatalf("evidence lacks %s: %s", want, ev)
		}
	}
	t.Logf("audit row evidence: %s", ev)

	if got := s.Order.Metric("reconciliation_differences_total", "classification", "result_missing"); got != 1 {
		t.Fatalf("reconciliation_differences_total{result_missing} = %v, want 1", got)
	}
	if got := s.Order.Metric("reconciliation_repairs_total", "action", "apply_result", "outcome", "repaired"); got != 1 {
		t.Fatalf("reconciliation_repairs_total{apply_result,repaired} = %v, want 1", got)
	}

	// The timeline shows the repair and the move it made.
	tl := timeline(t, s, orderID)
	keys := tl.keys()
	ri, ci := slices.Index(keys, "order/reconciliation.repair"), slices.Index(keys, "order/order.transition:confirmed")
	if ri < 0 || ci < 0 || tl.Entries[ci].Detail["actor"] != "reconciler" || tl.Entries[ci].Detail["repair_id"] != repairID {
		t.Fatalf("timeline lacks the repair or the reconciler's move:\n%s", tl)
	}
	if slices.Contains(keys, "order/inbox.processed:payment.succeeded") {
		t.Fatalf("the dropped event shows as processed:\n%s", tl)
	}
}

// A confirmed order whose order.confirmed never reaches inventory: here
// the message is drained from inventory's queue while inventory is down
// (as if its consumer had dead-lettered it, or it was lost), so the
// reservation stays reserved and its lease would release stock that was
// sold. The order is finished and every queue is empty; the reconciler,
// comparing finished orders with the participants' records, finds the
// reservation not committed and sends the original event again (same
// event_id), with an audit row. Inventory commits the sale before the
// lease ends; the next run finds the order consistent and closes it.
func TestReconcilerRepairsADroppedOrderConfirmed(t *testing.T) {
	t.Parallel()
	s := startReconcilingByHand(t, sagatest.WithEnv("inventory", "RESERVATION_TTL", "2m"))
	before := stock(t, s, "SKU-1")

	o, _ := confirmDroppedOnItsWayToInventory(t, s, "confirm-dropped-1")
	s.Inventory.Start()
	type leaseJSON struct {
		Status    string     `json:"status"`
		ExpiresAt *time.Time `json:"expires_at"`
		ExpiredAt *time.Time `json:"expired_at"`
		UpdatedAt time.Time  `json:"updated_at"`
	}
	var r leaseJSON
	s.Inventory.Do("GET", "/reservations/"+o.OrderID, nil, nil, &r)
	if r.Status != "reserved" {
		t.Fatalf("reservation %s after the dropped confirm, want still reserved", r.Status)
	}
	time.Sleep(300 * time.Millisecond) // past the grace window; nothing else is on its way

	sum := reconcileNow(t, s)
	if len(sum.Repairs) != 1 || len(sum.Errors) != 0 {
		t.Fatalf("run summary = %+v, want the confirmed order repaired", sum)
	}
	rep := sum.Repairs[0]
	if rep.OrderID != o.OrderID || rep.Classification != "not_consumed" || rep.Action != "resend_event" || rep.Outcome != "repaired" {
		t.Fatalf("repair = %+v, want not_consumed / resend_event / repaired", rep)
	}
	sagatest.Eventually(t, 30*time.Second, "inventory to commit the sale", func() bool {
		s.Inventory.Do("GET", "/reservations/"+o.OrderID, nil, nil, &r)
		return r.Status == "committed"
	})
	if r.ExpiredAt != nil || r.ExpiresAt == nil || !r.UpdatedAt.Before(*r.ExpiresAt) {
		t.Fatalf("reservation %+v, want committed before its lease ended", r)
	}
	if after := stock(t, s, "SKU-1"); after.OnHand != before.OnHand-2 || after.Reserved != 0 {
		t.Fatalf("stock %+v, want on_hand %d and nothing reserved", after, before.OnHand-2)
	}
	if c := charges(t, s, o.OrderID); len(c.Charges) != 1 {
		t.Fatalf("PSP charges = %d, want 1", len(c.Charges))
	}
	var sent int
	if err := s.Order.DB.Get(&sent, `SELECT COUNT(*) FROM outbox_events WHERE aggregate_id = ? AND event_type = 'order.confirmed'`, o.OrderID); err != nil || sent != 1 {
		t.Fatalf("%d order.confirmed rows (%v), want the one original event", sent, err)
	}

	// The audit shows what was found and done, with the evidence.
	var report struct {
		Repairs []struct {
			RepairID string          `json:"repair_id"`
			Action   string          `json:"action"`
			Evidence json.RawMessage `json:"evidence"`
		} `json:"repairs"`
	}
	s.Order.Do("GET", "/admin/reconciliation?order_id="+o.OrderID, nil, nil, &report)
	if len(report.Repairs) != 1 || report.Repairs[0].RepairID != rep.RepairID ||
		!strings.Contains(string(report.Repairs[0].Evidence), `"reserved"`) || !strings.Contains(string(report.Repairs[0].Evidence), `"confirmed"`) {
		t.Fatalf("report = %+v, want the repair with the order and the reservation as evidence", report)
	}

	// The next run, past the grace, finds the order consistent and closes it.
	time.Sleep(300 * time.Millisecond)
	if sum = reconcileNow(t, s); sum.Closed != 1 || len(sum.Repairs) != 0 {
		t.Fatalf("run after the repair = %+v, want the order closed", sum)
	}
}

// Inventory is down: the order waits in pending_inventory until its
// participant deadline, which a restarted order service still knows (it is
// in the orders table), then is cancelled with the reason. When inventory
// comes back it finds OrderCreated followed by OrderCancelled: nothing
// stays held and nothing is charged.
func TestParticipantDeadlineCancelsAcrossARestart(t *testing.T) {
	t.Parallel()
	// The first order service sweeps once, at its start, before the order
	// exists; only the restarted one, which knows the deadline from the
	// orders table alone, can expire it (however long the restart takes
	// on a loaded machine).
	s := sagatest.Start(t, sagatest.WithEnv("order", "PARTICIPANT_DEADLINE", "1s"),
		sagatest.WithEnv("order", "DEADLINE_SWEEP_INTERVAL", "1h"))
	before := stock(t, s, "SKU-2")
	s.Inventory.Stop()
	o := createOrder(t, s, "deadline-1", "c-1", "SKU-2", 3)
	var got orderJSON
	s.Order.Do("GET", "/orders/"+o.OrderID, nil, nil, &got)

	// The order service restarts: nothing in memory.
	s.Order.Stop()
	var status string
	if err := s.Order.DB.Get(&status, `SELECT status FROM orders WHERE id = ?`, o.OrderID); err != nil || status != "pending_inventory" {
		t.Fatalf("status %q (%v) before the restart, want pending_inventory", status, err)
	}
	s.Order.Env["DEADLINE_SWEEP_INTERVAL"] = "100ms"
	s.Order.Start()
	cancelled := waitStatus(t, s, o.OrderID, "cancelled")
	if cancelled.StatusReason != "inventory did not answer in time" {
		t.Fatalf("reason %q", cancelled.StatusReason)
	}
	// The sweep counts the expiry after its commit, which the status
	// already shows: wait for the count, then check it is exactly one.
	sagatest.Eventually(t, 5*time.Second, "the deadline expiry to be counted", func() bool {
		return s.Order.Metric("order_deadlines_expired_total", "status", "pending_inventory") >= 1
	})
	if got := s.Order.Metric("order_deadlines_expired_total", "status", "pending_inventory"); got != 1 {
		t.Fatalf("order_deadlines_expired_total{pending_inventory} = %v, want 1", got)
	}

	s.Inventory.Start()
	sagatest.Eventually(t, 30*time.Second, "inventory to settle the cancelled order", func() bool {
		var r reservationJSON
		code := s.Inventory.Do("GET", "/reservations/"+o.OrderID, nil, nil, &r)
		return code == 200 && (r.Status == "released" || r.Status == "cancelled_before_reserve")
	})
	sagatest.Eventually(t, 10*time.Second, "stock back to where it was", func() bool {
		return stock(t, s, "SKU-2") == before
	})
	// Payment saw the cancel first and left its marker, so a late
	// inventory.reserved charges nothing.
	sagatest.Eventually(t, 10*time.Second, "payment's cancel marker", func() bool {
		var p paymentJSON
		s.Payment.Do("GET", "/payments/"+o.OrderID, nil, nil, &p)
		return p.Status == "cancelled_before_charge"
	})
	if c := charges(t, s, o.OrderID); len(c.Charges) != 0 {
		t.Fatalf("PSP charges = %+v for an order cancelled before its reservation", c.Charges)
	}
	if got := waitStatus(t, s, o.OrderID, "cancelled"); got.Status != "cancelled" {
		t.Fatal(got.Status)
	}
}

// The payment is slow: the charge succeeded at the PSP, but its outcome is
// not recorded yet when the order's payment deadline passes. The deadline
// sweep asks payment before cancelling; payment, whose record says
// pending, asks the PSP by the charge's key and answers "succeeded", so
// the order is not cancelled (the chapter: query the status of a charge
// whose outcome is unknown, do not cancel blindly). When the outcome is
// recorded the order is confirmed: one charge, no refund, the sale
// committed. PAYMENT_DEADLINE is the one setting both services read; the
// order asks PAYMENT_DEADLINE_MARGIN after it.
func TestPaymentDeadlineAsksPaymentBeforeCancelling(t *testing.T) {
	t.Parallel()
	s := sagatest.Start(t,
		sagatest.WithEnv("order", "PAYMENT_DEADLINE", "1s"), sagatest.WithEnv("payment", "PAYMENT_DEADLINE", "1s"),
		sagatest.WithEnv("order", "PAYMENT_DEADLINE_MARGIN", "1s"),
		sagatest.WithEnv("order", "PAYMENT_SWEEP_INTERVAL", "500ms"), sagatest.WithEnv("payment", "PAYMENT_SWEEP_INTERVAL", "500ms"),
		sagatest.WithEnv("order", "DEADLINE_SWEEP_INTERVAL", "100ms"))
	before := stock(t, s, "SKU-4")
	o, gate := createHeld(t, s, "payment.charge.after-psp-before-record", "pay-deadline-1", "SKU-4", 1)
	// The deadline passes; the sweep either asks payment (and waits) or
	// cancels.
	var got orderJSON
	sagatest.Eventually(t, 30*time.Second, "the order's payment deadline to pass and the sweep to decide", func() bool {
		s.Order.Do("GET", "/orders/"+o.OrderID, nil, nil, &got)
		return got.Status == "cancelled" ||
			s.Order.Metric("order_payment_deadline_checks_total", "outcome", "succeeded", "decision", "wait") >= 1
	})
	if got.Status != "awaiting_payment" {
		t.Fatalf("order %s (%s) at its payment deadline although the PSP had charged it, want awaiting_payment", got.Status, got.StatusReason)
	}
	gate.Release()
	waitStatus(t, s, o.OrderID, "confirmed")
	waitReservation(t, s, o.OrderID, "committed")
	if after := stock(t, s, "SKU-4"); after.OnHand != before.OnHand-1 || after.Reserved != 0 {
		t.Fatalf("stock %+v, want one sold", after)
	}
	var p paymentJSON
	s.Payment.Do("GET", "/payments/"+o.OrderID, nil, nil, &p)
	if c := charges(t, s, o.OrderID); p.Status != "succeeded" || len(c.Charges) != 1 {
		t.Fatalf("payment %+v with %d charges, want succeeded with one charge and no refund", p, len(c.Charges))
	}
	if got := s.Order.Metric("order_deadlines_expired_total", "status", "awaiting_payment"); got != 0 {
		t.Fatalf("order_deadlines_expired_total{awaiting_payment} = %v, want 0", got)
	}
}

// confirmDroppedOnItsWayToInventory places an order held before the
// payment is recorded, stops inventory, lets the saga confirm the order
// and drains the order.confirmed from inventory's queue: the order is
// finished, the message gone, inventory still down (the caller starts it
// again). It returns the order and the dropped message.
func confirmDroppedOnItsWayToInventory(t *testing.T, s *sagatest.Saga, customer string) (orderJSON, amqp.Delivery) {
	t.Helper()
	o, gate := createHeld(t, s, "payment.charge.after-psp-before-record", customer, "SKU-1", 2)
	waitStatus(t, s, o.OrderID, "awaiting_payment")
	s.Inventory.Stop()
	gate.Release()
	waitStatus(t, s, o.OrderID, "confirmed")
	sagatest.Eventually(t, 30*time.Second, "order.confirmed to be sent", func() bool {
		return slices.Contains(outboxTypes(t, s.Order, o.OrderID), "order.confirmed/sent")
	})
	dropped := rabbittest.Drain(t, s.NS.Queue("inventory.order-events"), 1, 10*time.Second)
	if len(dropped) != 1 || dropped[0].Type != events.OrderConfirmed {
		t.Fatalf("drained %d messages from inventory's queue, want the one order.confirmed", len(dropped))
	}
	return o, dropped[0]
}
