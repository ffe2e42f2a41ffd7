package lab

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/relmsg/ordersaga/pkg/events"
)

// The chapter's pitfalls that the experiment table names only in passing:
// the third ACK pitfall (三个 ACK 坑), and interview questions 1 (commit,
// then publish) and 7 (a synchronous call instead of the saga). Each runs
// the right way, and the wrong way behind its switch.

// watchFor is how long a wrong way is watched for a recovery that never
// comes: longer than the right way needs to recover.
const watchFor = 3 * time.Second

// watchBooks waits watchFor (reported as a wait for what), then reads the
// order's books and sku's stock: what a wrong way leaves once the right
// way would have recovered.
func (l *Lab) watchBooks(ctx context.Context, what, id, sku string) (Books, Stock, error) {
	l.step(Step{Kind: StepWaiting, What: what})
	time.Sleep(watchFor)
	l.step(Step{Kind: StepWaited, What: what, Seconds: watchFor.Seconds()})
	b, err := l.books(ctx, id)
	if err != nil {
		return b, Stock{}, err
	}
	after, err := l.stock(ctx, sku)
	return b, after, err
}

// --- the dedupe record and the business change (三个 ACK 坑: 只写去重记录) ---

func dedupeRecord(ctx context.Context, l *Lab, r *Report, wrong bool) error {
	const sku, qty = "SKU-2", 2
	const point = "inbox.after-claim"
	before, err := l.begin(ctx, r, sku)
	if err != nil {
		return err
	}
	if err := l.armCrash(ctx, r, "inventory", point); err != nil {
		return err
	}
	o, err := l.placeOrder(ctx, key("dedupe"), sku, qty)
	if err != nil {
		return err
	}
	if err := l.crashed(ctx, r, "inventory", point, "the consumer crashed between the inbox INSERT and the business change"); err != nil {
		return err
	}
	created, err := l.outboxEvent(ctx, "order", o.OrderID, events.OrderCreated)
	if err != nil {
		return err
	}
	if wrong {
		// The restarted process runs the right way again; the damage is
		// already committed.
		if err := l.waitFor(ctx, "the redelivery to be dropped as already processed", func() (bool, error) {
			d, err := l.metric(ctx, "inventory", "consumer_duplicates_suppressed_total", "consumer", "inventory")
			return d >= 1, err
		}); err != nil {
			return err
		}
		b, after, err := l.watchBooks(ctx, fmt.Sprintf("%s: longer than the right way needs to apply the redelivery", watchFor), o.OrderID, sku)
		if err != nil {
			return err
		}
		dups, _ := l.metric(ctx, "inventory", "consumer_duplicates_suppressed_total", "consumer", "inventory")
		r.Sections = append(r.Sections, l.snapshot(ctx, "after the restart (wrong way: the dedupe record committed on its own)", o.OrderID, sku))
		r.check(b.inboxRows("inventory", created.EventID) == 1, "anomaly: the event is marked processed",
			"%d inventory inbox row(s) for %s", b.inboxRows("inventory", created.EventID), short(created.EventID))
		r.check(b.Reservation.Status == "" && len(b.Outbox["inventory"]) == 0, "anomaly: its effect is missing",
			"reservation %s, %d inventory outbox row(s)", orNone(b.Reservation.Status), len(b.Outbox["inventory"]))
		r.check(dups == 1, "anomaly: the redelivery was dropped as already processed",
			"consumer_duplicates_suppressed_total{inventory} %g (since the restart)", dups)
		r.checkStates(b, "pending_inventory", "", "")
		r.checkStockUnchanged("nothing reserved for the order", before, after)
		r.checkNothingCharged(b)
		r.Verdict = "WRONG WAY (the dedupe record in its own transaction): the inbox row committed, the consumer " +
			"crashed before the business change, and the broker's redelivery was dropped as already processed: the " +
			"event is marked done, nothing was reserved, the order is stuck in pending_inventory. Committing the " +
			"inbox row and the business change in one transaction is what prevents this."
		return nil
	}
	b, err := l.settle(ctx, r, "after the restart (the redelivery applied)", o.OrderID, sku, qty, before, nil)
	if err != nil {
		return err
	}
	dups, _ := l.metric(ctx, "inventory", "consumer_duplicates_suppressed_total", "consumer", "inventory")
	redelivered, _ := l.metric(ctx, "inventory", "consumer_redeliveries_total", "consumer", "inventory")
	r.check(redelivered >= 1 && dups == 0 && b.inboxRows("inventory", created.EventID) == 1,
		"the crash rolled the inbox row back with the change: the redelivery was applied, not dropped",
		"since the restart: consumer_redeliveries_total{inventory} %g, consumer_duplicates_suppressed_total %g; %d inbox row(s)",
		redelivered, dups, b.inboxRows("inventory", created.EventID))
	r.Verdict = "held: the inbox row and the business change are one transaction; the crash between them rolled both " +
		"back, the unacked message came back and was applied once."
	return nil
}

// --- commit, then publish (面试问答 1) ---------------------------------------

func commitThenPublish(ctx context.Context, l *Lab, r *Report, wrong bool) error {
	const sku, qty = "SKU-2", 1
	point := "order.create.after-commit"
	before, err := l.begin(ctx, r, sku)
	if err != nil {
		return err
	}
	if err := l.armCrash(ctx, r, "order", point); err != nil {
		return err
	}
	o, replayed, err := l.createThroughCrash(ctx, r, point, key("commit"), sku, qty)
	if err != nil {
		return err
	}
	r.check(replayed, "the order was committed before the crash", "the client's retry with the same key found order %s (Idempotent-Replayed)", o.OrderID)
	if wrong {
		b, after, err := l.watchBooks(ctx, fmt.Sprintf("%s: longer than the right way needs to deliver", watchFor), o.OrderID, sku)
		if err != nil {
			return err
		}
		r.Sections = append(r.Sections, l.snapshot(ctx, "after the restart (wrong way: published after COMMIT, no outbox)", o.OrderID, sku))
		r.checkStates(b, "pending_inventory", "", "")
		r.check(len(b.Outbox["order"]) == 0, "anomaly: no table says an event is owed", "%d outbox row(s) for order %s", len(b.Outbox["order"]), o.OrderID)
		r.check(len(b.Inbox) == 0 && b.Reservation.Status == "", "anomaly: inventory never heard of the order",
			"%d inbox row(s), reservation %s", len(b.Inbox), orNone(b.Reservation.Status))
		r.checkStockUnchanged("nothing reserved", before, after)
		r.checkNothingCharged(b)
		r.Verdict = "WRONG WAY (publish after COMMIT, no outbox): the order committed and the process died before " +
			"its publish; nothing records that an event is owed, so no restart, retry or dispatcher sends it: the " +
			"order waits in pending_inventory and inventory never hears of it (only the deadline or reconciliation " +
			"finds it). The outbox row, committed with the order, is what prevents this."
		return nil
	}
	b, err := l.settle(ctx, r, "after the restart (the dispatcher found the pending event)", o.OrderID, sku, qty, before, nil)
	if err != nil {
		return err
	}
	created, _ := b.outboxRow("order", events.OrderCreated)
	r.check(created.Attempts == 1, "the event waited in the outbox and was sent after the restart",
		"order.created %s sent at attempt %d", short(created.EventID), created.Attempts)
	r.Verdict = "held: the order and its OrderCreated outbox row committed together; the crash right after COMMIT left " +
		"the row pending, and the restarted dispatcher's poll sent it (提交后、认领前: dispatcher 后续扫描)."
	return nil
}

// --- a synchronous reserve (面试问答 7) ---------------------------------------

func syncReserve(ctx context.Context, l *Lab, r *Report, wrong bool) error {
	if wrong {
		return syncReserveWrong(ctx, l, r)
	}
	const sku, qty = "SKU-2", 1
	const point = "inbox.after-effect-before-commit"
	before, err := l.begin(ctx, r, sku)
	if err != nil {
		return err
	}
	// Inventory is slow: it holds the reservation's transaction open.
	if err := l.arm(ctx, "inventory", point, "pause", 1); err != nil {
		return err
	}
	start := time.Now()
	o, code, _, err := l.createOrder(ctx, key("sync"), "c-lab", sku, qty)
	took := time.Since(start)
	if err != nil {
		return err
	}
	r.check(code == http.StatusAccepted && o.Status == "pending_inventory", "the request answered at once: accepted, not failed",
		"POST /orders answered %d %s in %s", code, o.Status, took.Round(time.Millisecond))
	if err := l.waitPaused(ctx, "inventory to be busy with the reservation", "inventory", point); err != nil {
		return err
	}
	mid, _ := l.stock(ctx, sku)
	cur, _, _ := l.order(ctx, o.OrderID)
	r.Sections = append(r.Sections, l.snapshot(ctx, "inventory is slow; the caller already has its answer", o.OrderID, sku))
	r.check(cur.Status == "pending_inventory", "state: the caller's answer is still true", "order %s is %s", o.OrderID, cur.Status)
	r.checkStockUnchanged("nothing held until inventory commits", before, mid)
	if err := l.release(ctx, "inventory", point); err != nil {
		return err
	}
	if _, err := l.settle(ctx, r, "after inventory finished", o.OrderID, sku, qty, before, nil); err != nil {
		return err
	}
	r.Verdict = "held: the create's request never waited on inventory. It answered 202 pending_inventory at once, " +
		"a true answer however slow inventory was; OrderCreated waited in the outbox and queue until inventory took it, " +
		"and the saga finished the sale once. The timeout and the partial success of a synchronous call have no " +
		"window here (run -wrong-way to see them)."
	return nil
}

func syncReserveWrong(ctx context.Context, l *Lab, r *Report) error {
	const sku, qty = "SKU-2", 1
	const point = "inventory.sync-reserve.after-commit"
	const held = "outbox.dispatch.before-claim" // inventory's result event waits, so the moment holds still
	k := key("sync")
	before, err := l.begin(ctx, r, sku)
	if err != nil {
		return err
	}
	if err := l.wrongWayOn(ctx, r, "order"); err != nil {
		return err
	}
	if err := l.arm(ctx, "inventory", point, "pause", 1); err != nil {
		return err
	}
	if err := l.arm(ctx, "inventory", held, "pause", 0); err != nil {
		return err
	}
	last, err := l.lastOrderID(ctx)
	if err != nil {
		return err
	}
	_, code, _, err := l.createOrder(ctx, k, "c-lab", sku, qty)
	if err != nil {
		return err
	}
	r.check(code == http.StatusGatewayTimeout, "anomaly: the caller was told the order failed", "POST /orders answered %d", code)
	fp, _ := l.failpoint(ctx, "inventory", point)
	r.check(fp.Hits == 1, "inventory had reserved and committed before the timeout", "%s hit %d time(s)", point, fp.Hits)
	// The caller has no order id; the order service committed one before
	// it called inventory.
	id, err := l.lastOrderID(ctx)
	if err != nil {
		return err
	}
	if id == last {
		return fmt.Errorf("no order was committed for the timed-out create")
	}
	oid := fmt.Sprint(id)
	l.step(Step{Kind: StepOrder, OrderID: oid, What: "the order the timed-out create committed"})
	b, err := l.books(ctx, oid)
	if err != nil {
		return err
	}
	mid, _ := l.stock(ctx, sku)
	r.Sections = append(r.Sections, l.snapshot(ctx, "after the timeout: the caller got 504, inventory had reserved", oid, sku))
	r.check(b.Reservation.Status == "reserved" && reserves(b.Reservation, sku, qty) && mid.Reserved == before.Reserved+qty && mid.OnHand == before.OnHand,
		"anomaly: stock held for an order the caller believes failed", "reservation %s; %s reserved %d -> %d, on_hand %d -> %d",
		lines(b.Reservation), sku, before.Reserved, mid.Reserved, before.OnHand, mid.OnHand)
	r.check(b.Order.Status == "pending_inventory" && len(b.Outbox["order"]) == 0, "state: the order waits, with no event of its own",
		"order %s is %s, %d order outbox row(s)", oid, orNone(b.Order.Status), len(b.Outbox["order"]))
	r.checkNothingCharged(b)

	// Closing the gap takes what the asynchronous path has anyway: a status
	// query, the idempotency key, and a recovery that finishes the step.
	var res Reservation
	if res, err = l.reservation(ctx, oid); err != nil {
		return err
	}
	l.step(Step{Kind: StepOperator, Service: "inventory", What: "status query GET /reservations/" + oid + ": " + orNone(res.Status)})
	again, code, hdr, err := l.createOrder(ctx, k, "c-lab", sku, qty)
	if err != nil {
		return err
	}
	l.step(Step{Kind: StepOperator, Service: "order", What: "the client's retry with the same Idempotency-Key"})
	after, _ := l.stock(ctx, sku)
	r.check(res.Status == "reserved" && code == http.StatusAccepted && hdr.Get("Idempotent-Replayed") == "true" && again.OrderID == oid &&
		after.Reserved == mid.Reserved, "the status query and the key find the one order: no second order, no second hold",
		"GET /reservations/%s: %s; the retry answered %d with order %s (replayed %q); reserved %d -> %d",
		oid, orNone(res.Status), code, again.OrderID, hdr.Get("Idempotent-Replayed"), mid.Reserved, after.Reserved)
	if err := l.disarm(ctx, "inventory", held); err != nil { // inventory's result event goes; the saga finishes the step
		return err
	}
	if _, err := l.settle(ctx, r, "after recovery (inventory's event finished the saga)", oid, sku, qty, before,
		Events{"order": {events.OrderConfirmed}, "inventory": {events.InventoryReserved},
			"payment": {events.PaymentChargeRequested, events.PaymentSucceeded}}); err != nil {
		return err
	}
	r.Verdict = "WRONG WAY (synchronous reserve): the create waited on inventory inside its request and gave up after " +
		"1 s, answering 504, while inventory had already reserved: stock held for an order the caller believed had " +
		"failed (a retry under a new key would have held it twice). Closing the gap took inventory's status query by " +
		"order id, the client's Idempotency-Key, and a recovery to finish (here inventory's own result event; without " +
		"one, the reservation's lease). The asynchronous path needs the same three anyway, and never tells a caller " +
		"\"failed\" for an order that is going through."
	return nil
}
