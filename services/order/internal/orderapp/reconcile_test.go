package orderapp_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderapp"
)

// awaitingPayment creates an order and delivers its InventoryReserved.
func (r *recon) awaitingPayment(t *testing.T, key string) order.Order {
	t.Helper()
	o := r.create(t, key)
	r.deliver(t, reserved(t, o))
	if s := r.status(t, o.ID).Status; s != order.AwaitingPayment {
		t.Fatalf("status %s, want awaiting_payment", s)
	}
	return o
}

// stale creates an order awaiting payment whose last change was ago in the
// past (outside the grace window when ago is past it), with inventory's
// reservation reserved and payment's record in paymentStatus.
func (r *recon) stale(t *testing.T, key string, ago time.Duration, paymentStatus string) order.Order {
	t.Helper()
	o := r.awaitingPayment(t, key)
	r.age(t, o.ID, ago)
	r.inventory.set(o.ID, reservation(order.ResReserved))
	r.payment.set(o.ID, payment(paymentStatus))
	return o
}

// wantOneRepair checks that a run made one repair, of classification
// class, by action, with outcome ("": any), and returns it.
func wantOneRepair(t *testing.T, sum orderapp.RunSummary, class, action, outcome string) orderapp.RepairSummary {
	t.Helper()
	if len(sum.Repairs) != 1 {
		t.Fatalf("summary = %+v, want one repair", sum)
	}
	rep := sum.Repairs[0]
	for _, c := range [][2]string{{rep.Classification, class}, {rep.Action, action}, {rep.Outcome, outcome}} {
		if c[1] != "" && c[0] != c[1] {
			t.Fatalf("summary = %+v, want one repair: %q / %q / %q", sum, class, action, outcome)
		}
	}
	return rep
}

func reservation(status string) map[string]any {
	return map[string]any{"status": status, "reason": "", "items": []any{}}
}

func payment(status string) map[string]any {
	return map[string]any{"status": status, "amount_cents": 19000, "currency": "EUR", "idempotency_key": "charge-x",
		"psp_charge_id": "ch_TEST", "failure_reason": "", "refund": nil}
}

func outboxOf(f *fixture, t *testing.T, id uint64, typ string) []outboxRow {
	t.Helper()
	var out []outboxRow
	for _, r := range f.outbox(t) {
		if r.Agg == id && r.Type == typ {
			out = append(out, r)
		}
	}
	return out
}

// The chapter's stuck order: payment charged and said so, but its
// PaymentSucceeded never reached the order (dropped). The reconciler finds
// it, classifies it result_missing, applies PaymentSucceeded through the
// consumer's transition (confirmed + OrderConfirmed), writes an audit row
// with the evidence, and calls no PSP.
func TestReconcilerRepairsALostPaymentResult(t *testing.T) {
	t.Parallel()
	r := newRecon(t)
	o := r.stale(t, "stuck", 5*time.Minute, order.PaySucceeded)

	sum := r.run(t)
	if sum.Checked != 1 || sum.Found["result_missing"] != 1 || len(sum.Repairs) != 1 || len(sum.Errors) != 0 {
		t.Fatalf("summary = %+v, want one result_missing repair", sum)
	}
	rep := sum.Repairs[0]
	if rep.Classification != "result_missing" || rep.Action != "apply_result" || rep.Outcome != "repaired" {
		t.Fatalf("repair = %+v", rep)
	}
	if got := r.status(t, o.ID); got.Status != order.Confirmed || !got.DeadlineAt.IsZero() {
		t.Fatalf("order = %s deadline %v, want confirmed without a deadline", got.Status, got.DeadlineAt)
	}
	confirmed := outboxOf(r.fixture, t, o.ID, events.OrderConfirmed)
	if len(confirmed) != 1 || confirmed[0].Version != 2 || confirmed[0].Status != "pending" {
		t.Fatalf("order.confirmed rows = %+v, want one, version 2, pending", confirmed)
	}

	audits := r.audits(t, o.ID)
	if len(audits) != 1 || audits[0].RepairID != rep.RepairID || audits[0].RunID != sum.RunID || audits[0].Outcome != "repaired" {
		t.Fatalf("audit rows = %+v, want the one repair of run %s", audits, sum.RunID)
	}
	checkLostPaymentEvidence(t, audits[0].Evidence)
	// order_history: the move, by the reconciler, with the repair id.
	h := r.history(t, o.ID)
	last := h[len(h)-1]
	if last.Actor != orderapp.ActorReconciler || last.To != "confirmed" || last.Trigger != "payment_succeeded" ||
		last.RepairID == nil || *last.RepairID != rep.RepairID || last.EmittedEventID == nil || *last.EmittedEventID != confirmed[0].EventID {
		t.Fatalf("last history row = %+v", last)
	}
	if got := r.counter(t, "reconciliation_differences_total", "classification", "result_missing"); got != 1 {
		t.Fatalf("reconciliation_differences_total{result_missing} = %v, want 1", got)
	}
	if got := r.counter(t, "reconciliation_repairs_total", "action", "apply_result", "outcome", "repaired"); got != 1 {
		t.Fatalf("reconciliation_repairs_total{apply_result,repaired} = %v, want 1", got)
	}
	if r.payment.hit("GET /payments/"+itoa(o.ID)) != 1 {
		t.Fatalf("payment asked %d times", r.payment.hit("GET /payments/"+itoa(o.ID)))
	}

	// A second run finds nothing: the order is closed.
	if again := r.run(t); again.Checked != 0 || len(again.Repairs) != 0 {
		t.Fatalf("second run = %+v, want nothing", again)
	}
	// The lost event arriving late changes nothing.
	r.deliver(t, envelope(t, events.PaymentSucceeded, o.ID, events.PaymentSucceededV1{OrderID: o.ID, AmountCents: o.TotalCents, Currency: "EUR", ChargeID: "ch_TEST"}))
	if n := len(outboxOf(r.fixture, t, o.ID, events.OrderConfirmed)); n != 1 {
		t.Fatalf("order.confirmed rows after the late event: %d, want 1", n)
	}
}

// checkLostPaymentEvidence checks the evidence the reconciler kept of a
// lost payment result: what it read of the order, of payment (succeeded)
// and of inventory (reserved), and its classification.
func checkLostPaymentEvidence(t *testing.T, evidence json.RawMessage) {
	t.Helper()
	var ev struct {
		Order struct {
			Status string `json:"status"`
		} `json:"order"`
		Payment struct {
			HTTPStatus int       `json:"http_status"`
			AnsweredAt time.Time `json:"answered_at"`
			Body       struct {
				Status string `json:"status"`
			} `json:"body"`
		} `json:"payment"`
		Reservation struct {
			Body struct {
				Status string `json:"status"`
			} `json:"body"`
		} `json:"inventory_reservation"`
		OrderOutbox    []json.RawMessage `json:"order_outbox"`
		Classification string            `json:"classification"`
	}
	if err := json.Unmarshal(evidence, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Order.Status != "awaiting_payment" || ev.Payment.HTTPStatus != 200 || ev.Payment.Body.Status != "succeeded" ||
		ev.Payment.AnsweredAt.IsZero() || ev.Reservation.Body.Status != "reserved" || len(ev.OrderOutbox) != 1 ||
		ev.Classification != "result_missing" {
		t.Fatalf("evidence = %s", evidence)
	}
}

// A healthy order, an order inside the grace window and an order whose
// payment is still pending are left alone: no repair, no audit row.
func TestReconcilerLeavesHealthyOrdersAlone(t *testing.T) {
	t.Parallel()
	r := newRecon(t)
	fresh := r.awaitingPayment(t, "fresh") // changed just now: inside the grace window
	r.inventory.set(fresh.ID, reservation(order.ResReserved))
	r.payment.set(fresh.ID, payment(order.PaySucceeded))

	charging := r.stale(t, "charging", 5*time.Minute, order.PayPending) // stale, but the payment is still pending

	done := r.awaitingPayment(t, "done") // confirmed: closed
	r.deliver(t, envelope(t, events.PaymentSucceeded, done.ID, events.PaymentSucceededV1{OrderID: done.ID}))
	r.age(t, done.ID, time.Hour)

	sum := r.run(t)
	if sum.Checked != 1 || sum.Found["in_progress"] != 1 || len(sum.Repairs) != 0 {
		t.Fatalf("summary = %+v, want one order checked, in progress, no repair", sum)
	}
	for _, o := range []order.Order{fresh, charging, done} {
		if a := r.audits(t, o.ID); len(a) != 0 {
			t.Fatalf("order %d has audit rows %+v", o.ID, a)
		}
	}
	if s := r.status(t, fresh.ID).Status; s != order.AwaitingPayment {
		t.Fatalf("order inside the grace window moved to %s", s)
	}
	if r.payment.hit("GET /payments/"+itoa(fresh.ID)) != 0 {
		t.Fatal("an order inside the grace window was looked at")
	}
	if got := r.counter(t, "reconciliation_differences_total", "classification", "result_missing"); got != 0 {
		t.Fatalf("differences counted: %v", got)
	}
}

// Our OrderCreated ended failed in the outbox: the reconciler puts the same
// row (same event_id) back to pending with a fresh round of attempts.
func TestReconcilerRepublishesAFailedEventByItsID(t *testing.T) {
	t.Parallel()
	r := newRecon(t)
	o := r.create(t, "lost")
	created := r.outbox(t)[0]
	if _, err := r.db.Exec(`UPDATE outbox_events SET status = 'failed', attempts = 10 WHERE event_id = ?`, created.EventID); err != nil {
		t.Fatal(err)
	}
	r.age(t, o.ID, 5*time.Minute)
	// inventory and payment have no record (404).

	sum := r.run(t)
	wantOneRepair(t, sum, "event_not_sent", "republish_event", "repaired")
	var row struct {
		Status   string `db:"status"`
		Attempts int    `db:"attempts"`
		Due      bool   `db:"due"`
		N        int    `db:"n"`
	}
	if err := r.db.Get(&row, `SELECT status, attempts, next_attempt_at <= NOW(6) AS due,
  (SELECT COUNT(*) FROM outbox_events) AS n FROM outbox_events WHERE event_id = ?`, created.EventID); err != nil {
		t.Fatal(err)
	}
	if row.Status != "pending" || row.Attempts != 0 || !row.Due || row.N != 1 {
		t.Fatalf("outbox row = %+v, want the same event pending, attempts 0, due now, and no new row", row)
	}
	if s := r.status(t, o.ID).Status; s != order.PendingInventory {
		t.Fatalf("order moved to %s; a re-publish must not touch it", s)
	}
	if r.wakes.Load() < 2 {
		t.Fatal("the dispatcher was not woken after the re-publish")
	}
}

// OrderCreated was sent but inventory has no reservation (not consumed):
// the same event_id is sent again.
func TestReconcilerResendsASentButUnconsumedEvent(t *testing.T) {
	t.Parallel()
	r := newRecon(t)
	o := r.create(t, "unconsumed")
	created := r.outbox(t)[0]
	if _, err := r.db.Exec(`UPDATE outbox_events SET status = 'sent', attempts = 1, sent_at = NOW(6) WHERE event_id = ?`, created.EventID); err != nil {
		t.Fatal(err)
	}
	r.age(t, o.ID, 5*time.Minute)

	sum := r.run(t)
	wantOneRepair(t, sum, "not_consumed", "resend_event", "repaired")
	rows := r.outbox(t)
	if len(rows) != 1 || rows[0].EventID != created.EventID || rows[0].Status != "pending" {
		t.Fatalf("outbox = %+v, want the same event back to pending", rows)
	}
	// The evidence keeps the first sent_at, which the re-send overwrites.
	a := r.audits(t, o.ID)
	var ev struct {
		OrderOutbox []struct {
			EventID string     `json:"event_id"`
			Status  string     `json:"status"`
			SentAt  *time.Time `json:"sent_at"`
		} `json:"order_outbox"`
	}
	if len(a) != 1 {
		t.Fatalf("audit rows = %+v, want 1", a)
	}
	if err := json.Unmarshal(a[0].Evidence, &ev); err != nil {
		t.Fatal(err)
	}
	if len(ev.OrderOutbox) != 1 || ev.OrderOutbox[0].Status != "sent" || ev.OrderOutbox[0].SentAt == nil {
		t.Fatalf("evidence = %s, want the event as sent, with its sent_at", a[0].Evidence)
	}
}

// Inventory reserved, but its inventory.reserved is failed in its own
// outbox: neither the order nor payment got it. The fix is at the source:
// inventory retries that event by its id, so payment gets it too.
func TestReconcilerAsksTheParticipantToRetryItsFailedEvent(t *testing.T) {
	t.Parallel()
	r := newRecon(t)
	o := r.create(t, "inv-failed")
	r.age(t, o.ID, 5*time.Minute)
	r.inventory.set(o.ID, reservation(order.ResReserved))
	r.inventory.setOutbox(o.ID, map[string]any{"event_id": "0190f0e0-0000-7000-8000-000000000001", "event_type": "inventory.reserved",
		"aggregate_version": 1, "status": "failed", "attempts": 10, "created_at": time.Now().UTC()})

	sum := r.run(t)
	wantOneRepair(t, sum, "", "republish_participant_event", "repaired")
	if len(r.inventory.retried) != 1 || r.inventory.retried[0] != "0190f0e0-0000-7000-8000-000000000001" {
		t.Fatalf("inventory retried %v", r.inventory.retried)
	}
	if s := r.status(t, o.ID).Status; s != order.PendingInventory {
		t.Fatalf("order moved to %s; the retried event moves it when it arrives", s)
	}
}

// The lost event arrives between the scan and the repair: the repair's
// compare-and-set under the row lock sees the change and does nothing. One
// OrderConfirmed, an audit row saying so.
func TestReconcilerRespectsAChangeDuringTheScan(t *testing.T) {
	t.Parallel()
	r := newRecon(t)
	o := r.stale(t, "race", 5*time.Minute, order.PaySucceeded)

	gate, done := r.runPaused(t, context.Background(), "admin")
	// The lost event arrives now.
	r.deliver(t, envelope(t, events.PaymentSucceeded, o.ID, events.PaymentSucceededV1{OrderID: o.ID, AmountCents: o.TotalCents, Currency: "EUR", ChargeID: "ch_TEST"}))
	gate.Release()
	res := <-done
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if len(res.Value.Repairs) != 1 || res.Value.Repairs[0].Outcome != "state_changed" {
		t.Fatalf("summary = %+v, want the repair skipped as state_changed", res.Value)
	}
	if n := len(outboxOf(r.fixture, t, o.ID, events.OrderConfirmed)); n != 1 {
		t.Fatalf("order.confirmed rows = %d, want 1 (the consumer's)", n)
	}
	for _, h := range r.history(t, o.ID) {
		if h.Actor == orderapp.ActorReconciler {
			t.Fatalf("the reconciler moved the order: %+v", h)
		}
	}
	if got := r.counter(t, "reconciliation_repairs_total", "action", "apply_result", "outcome", "state_changed"); got != 1 {
		t.Fatalf("repairs{apply_result,state_changed} = %v", got)
	}
}

// A participant that cannot be asked (500) decides nothing: no repair, no
// audit row, the next run asks again.
func TestReconcilerDecidesNothingOnHalfTheEvidence(t *testing.T) {
	t.Parallel()
	r := newRecon(t)
	o := r.stale(t, "half", 5*time.Minute, order.PaySucceeded)
	r.payment.setStatus(o.ID, 500) // answers 500 whatever it holds

	sum := r.run(t)
	if sum.Found["unknown"] != 1 || len(sum.Repairs) != 0 {
		t.Fatalf("summary = %+v, want unknown, no repair", sum)
	}
	if s := r.status(t, o.ID).Status; s != order.AwaitingPayment || len(r.audits(t, o.ID)) != 0 {
		t.Fatalf("status %s, audits %v", s, r.audits(t, o.ID))
	}
}

// A payment parked as needs_attention is reported once (an operator acts),
// not on every run, and the order is not touched.
func TestReconcilerReportsWhatItCannotRepairOnce(t *testing.T) {
	t.Parallel()
	r := newRecon(t)
	o := r.stale(t, "parked", 5*time.Minute, order.PayNeedsAttention)

	first, second := r.run(t), r.run(t)
	if len(first.Repairs) != 1 || first.Repairs[0].Classification != "really_failed" || first.Repairs[0].Outcome != "reported" {
		t.Fatalf("first run = %+v", first)
	}
	if len(second.Repairs) != 0 || second.Found["really_failed"] != 1 {
		t.Fatalf("second run = %+v, want the finding but no second report", second)
	}
	if a := r.audits(t, o.ID); len(a) != 1 {
		t.Fatalf("audit rows = %d, want 1", len(a))
	}
	if s := r.status(t, o.ID).Status; s != order.AwaitingPayment {
		t.Fatalf("status %s", s)
	}
}

// A cancelled order whose refund the payment service made, but whose
// PaymentRefunded was lost: the refund status is closed through the
// consumer's transition.
func TestReconcilerClosesARefundWhoseResultWasLost(t *testing.T) {
	t.Parallel()
	r := newRecon(t)
	o := r.awaitingPayment(t, "refund")
	r.deliver(t, envelope(t, events.PaymentSucceeded, o.ID, events.PaymentSucceededV1{OrderID: o.ID}))
	if _, res, _, err := r.app.Cancel(context.Background(), "cancel-1", o.ID, "changed my mind"); err != nil || res != orderapp.Cancelled {
		t.Fatalf("cancel: %v %v", res, err)
	}
	if got := r.status(t, o.ID); got.RefundStatus != order.RefundPending {
		t.Fatalf("refund %s, want pending", got.RefundStatus)
	}
	r.age(t, o.ID, 5*time.Minute)
	r.inventory.set(o.ID, reservation(order.ResRestocked))
	p := payment(order.PayRefunded)
	p["refund"] = map[string]any{"status": "succeeded", "amount_cents": 19000, "psp_refund_id": "rf_TEST",
		"created_at": time.Now().UTC(), "updated_at": time.Now().UTC()}
	r.payment.set(o.ID, p)

	sum := r.run(t)
	wantOneRepair(t, sum, "result_missing", "", "repaired")
	if got := r.status(t, o.ID); got.Status != order.Cancelled || got.RefundStatus != order.RefundRefunded {
		t.Fatalf("order = %s/%s, want cancelled/refunded", got.Status, got.RefundStatus)
	}
}

// confirmed makes an order confirmed, its events sent (as a dispatcher
// would mark them), finished ago in the past.
func (r *recon) confirmed(t *testing.T, key string, ago time.Duration) order.Order {
	t.Helper()
	o := r.awaitingPayment(t, key)
	r.deliver(t, envelope(t, events.PaymentSucceeded, o.ID, events.PaymentSucceededV1{OrderID: o.ID, AmountCents: o.TotalCents}))
	if _, err := r.db.Exec(`UPDATE outbox_events SET status = 'sent', sent_at = NOW(6) WHERE aggregate_id = ?`, o.ID); err != nil {
		t.Fatal(err)
	}
	r.age(t, o.ID, ago)
	return o
}

// confirmNotApplied makes an order confirmed and finished 5 minutes ago
// whose order.confirmed (returned) was sent, while inventory still shows
// the stock reserved: the sale did not reach it. Payment shows the charge.
func (r *recon) confirmNotApplied(t *testing.T, key string) (order.Order, outboxRow) {
	t.Helper()
	o := r.confirmed(t, key, 5*time.Minute)
	r.inventory.set(o.ID, reservation(order.ResReserved))
	r.payment.set(o.ID, payment(order.PaySucceeded))
	return o, outboxOf(r.fixture, t, o.ID, events.OrderConfirmed)[0]
}

type checkRow struct {
	Result   string  `db:"result"`
	RepairID *string `db:"repair_id"`
}

func (r *recon) check(t *testing.T, id uint64) *checkRow {
	t.Helper()
	rows := selectAll[checkRow](t, r.db, `SELECT result, repair_id FROM reconciliation_checks WHERE order_id = ?`, id)
	if len(rows) == 0 {
		return nil
	}
	return &rows[0]
}

// A confirmed order whose order.confirmed never reached inventory (the
// consumer dead-lettered it, or it was lost): inventory still holds the
// stock as reserved, and the lease will release it. The reconciler looks
// at finished orders too, finds the difference, and sends the original
// event again (same event_id, the outbox's requeue), with an audit row.
// Once inventory shows the sale committed, the order is closed
// (consistent) and not looked at again.
func TestReconcilerResendsAConfirmInventoryNeverApplied(t *testing.T) {
	t.Parallel()
	r := newRecon(t)
	o, sent := r.confirmNotApplied(t, "confirm-lost")

	sum := r.run(t)
	if sum.Checked != 1 || len(sum.Repairs) != 1 || len(sum.Errors) != 0 {
		t.Fatalf("summary = %+v, want the finished order checked and repaired", sum)
	}
	rep := sum.Repairs[0]
	if rep.Classification != "not_consumed" || rep.Action != "resend_event" || rep.Outcome != "repaired" {
		t.Fatalf("repair = %+v, want not_consumed / resend_event / repaired", rep)
	}
	again := outboxOf(r.fixture, t, o.ID, events.OrderConfirmed)
	if len(again) != 1 || again[0].EventID != sent.EventID || again[0].Status != "pending" {
		t.Fatalf("order.confirmed rows = %+v, want the same event (%s) back to pending", again, sent.EventID)
	}
	audits := r.audits(t, o.ID)
	if len(audits) != 1 || audits[0].RepairID != rep.RepairID || !strings.Contains(string(audits[0].Evidence), `"reserved"`) {
		t.Fatalf("audit rows = %+v, want the repair with inventory's answer as evidence", audits)
	}
	if c := r.check(t, o.ID); c != nil {
		t.Fatalf("check row %+v after a repair, want none until the repair shows", c)
	}

	// Inventory applied it: the next run closes the order.
	r.inventory.set(o.ID, reservation(order.ResCommitted))
	if sum := r.run(t); sum.Checked != 1 || sum.Closed != 1 || len(sum.Repairs) != 0 {
		t.Fatalf("run after the repair = %+v, want the order checked and closed", sum)
	}
	if c := r.check(t, o.ID); c == nil || c.Result != "consistent" {
		t.Fatalf("check row = %+v, want consistent", c)
	}
	if sum := r.run(t); sum.Checked != 0 {
		t.Fatalf("third run = %+v, want nothing left to check", sum)
	}
}

// A finished order that differs and that the entry points do not repair
// (a resend inventory keeps ignoring), or that contradicts its outcome (a
// charge for a rejected order): parked as needs_attention with one audit
// row that says why, counted by reconciliation_needs_attention, and left
// out of later runs.
func TestReconcilerParksAFinishedOrderItCannotRepair(t *testing.T) {
	t.Parallel()
	r := newRecon(t)
	r.reg.MustRegister(r.app.Collector())
	o, _ := r.confirmNotApplied(t, "stubborn")
	for i := 0; i < order.MaxRepairs; i++ {
		if sum := r.run(t); len(sum.Repairs) != 1 || sum.Repairs[0].Action != "resend_event" {
			t.Fatalf("run %d = %+v, want a resend", i+1, sum)
		}
		// The dispatcher sends it again; inventory ignores it again.
		if _, err := r.db.Exec(`UPDATE outbox_events SET status = 'sent' WHERE aggregate_id = ?`, o.ID); err != nil {
			t.Fatal(err)
		}
	}
	sum := r.run(t)
	wantOneRepair(t, sum, "", "report", "reported") // after order.MaxRepairs resends
	c := r.check(t, o.ID)
	if c == nil || c.Result != "needs_attention" || c.RepairID == nil || *c.RepairID != sum.Repairs[0].RepairID {
		t.Fatalf("check row = %+v, want needs_attention with the report's repair id", c)
	}

	rejected := r.create(t, "rejected-charged")
	r.deliver(t, envelope(t, events.InventoryRejected, rejected.ID, events.InventoryRejectedV1{OrderID: rejected.ID, Reason: "short"}))
	r.age(t, rejected.ID, 5*time.Minute)
	r.inventory.set(rejected.ID, reservation(order.ResRejected))
	r.payment.set(rejected.ID, payment(order.PaySucceeded))
	sum = r.run(t)
	if len(sum.Repairs) != 1 || sum.Repairs[0].OrderID != itoa(rejected.ID) || sum.Repairs[0].Classification != "really_failed" {
		t.Fatalf("run = %+v, want the rejected-but-charged order reported", sum)
	}
	if got := r.counter(t, "reconciliation_needs_attention"); got != 2 {
		t.Fatalf("reconciliation_needs_attention = %v, want 2", got)
	}
	if sum := r.run(t); sum.Checked != 0 {
		t.Fatalf("next run = %+v, want the parked orders left out", sum)
	}
	if n := len(r.audits(t, o.ID)); n != order.MaxRepairs+1 {
		t.Fatalf("%d audit rows for the stubborn order, want %d resends and one report", n, order.MaxRepairs)
	}
}

// Finished orders are compared only inside the window and after the
// grace: one that finished a moment ago (its participants may still be
// at work) and one older than the window are left alone; one between them
// is checked.
func TestReconcilerChecksFinishedOrdersInsideTheWindowOnly(t *testing.T) {
	t.Parallel()
	r := newRecon(t) // grace 1m; window: the default, 1h
	fresh := r.confirmed(t, "fresh", 0)
	old := r.confirmed(t, "old", 2*time.Hour)
	due := r.confirmed(t, "due", 5*time.Minute)
	for _, o := range []order.Order{fresh, old, due} {
		r.inventory.set(o.ID, reservation(order.ResCommitted))
		r.payment.set(o.ID, payment(order.PaySucceeded))
	}
	sum := r.run(t)
	if sum.Checked != 1 || sum.Closed != 1 || sum.Found["consistent"] != 1 {
		t.Fatalf("summary = %+v, want only the order between grace and window checked", sum)
	}
	if r.check(t, due.ID) == nil || r.check(t, fresh.ID) != nil || r.check(t, old.ID) != nil {
		t.Fatalf("checks: due %+v, fresh %+v, old %+v; want only the due order's", r.check(t, due.ID), r.check(t, fresh.ID), r.check(t, old.ID))
	}
}
