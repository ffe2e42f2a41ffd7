package lab

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/events"
)

// The chapter's pitfalls that the experiment table names only in passing:
// the third ACK pitfall (三个 ACK 坑), and interview questions 1 (commit,
// then publish) and 7 (a synchronous call instead of the saga). Each runs
// the right way, and the wrong way behind its switch.

// watchFor is how long a wrong way is watched for a recovery that never
// comes: longer than the right way needs to recover.
const watchFor = 3 * time.Second

// watchBooks waits watchFor (reported as a wait for what), then reads the
// order's books: what a wrong way leaves once the right way would have
// recovered.
func (l *Lab) watchBooks(ctx context.Context, what, id string) (Books, error) {
	l.step(Step{Kind: StepWaiting, What: what})
	time.Sleep(watchFor)
	l.step(Step{Kind: StepWaited, What: what, Seconds: watchFor.Seconds()})
	return l.books(ctx, id)
}

// --- the dedupe record and the business change (三个 ACK 坑: 只写去重记录) ---

func dedupeRecord(ctx context.Context, l *Lab, r *Report, wrong bool) error {
	const sku, qty = "SKU-2", 2
	const point = "inbox.after-claim"
	l.begin(ctx, r, sku)
	if err := l.armCrash(ctx, r, "inventory", point); err != nil {
		return err
	}
	o, err := l.placeOrder(ctx, key("dedupe"), sku, qty)
	if err != nil {
		return err
	}
	if err := l.crashed(ctx, r, chkDRCrashed, "inventory", point); err != nil {
		return err
	}
	created, err := l.outboxEvent(ctx, "order", o.OrderID, events.OrderCreated)
	if err != nil {
		return err
	}
	// The restarted inventory process keeps a new journal: what it logged
	// about the event is what happened to the redelivery.
	if wrong {
		// The restarted process runs the right way again; the damage is
		// already committed.
		if _, err := l.waitLogged(ctx, "the redelivery to be dropped as already processed", "inventory", "inventory",
			logDuplicate, created.EventID, 1); err != nil {
			return err
		}
		b, err := l.watchBooks(ctx, fmt.Sprintf("%s: longer than the right way needs to apply the redelivery", watchFor), o.OrderID)
		if err != nil {
			return err
		}
		processed, dropped := l.told(ctx, "inventory", created.EventID).inbox("inventory")
		r.Sections = append(r.Sections, l.snapshot(ctx, "after the restart (wrong way: the dedupe record committed on its own)", o.OrderID, sku))
		r.check(b.inboxRows("inventory", created.EventID) == 1, chkDRMarked, b.inboxRows("inventory", created.EventID), short(created.EventID))
		r.check(b.Reservation.Status == "" && len(b.Outbox["inventory"]) == 0, chkDRMissing, orNone(b.Reservation.Status), len(b.Outbox["inventory"]))
		r.check(processed == 0 && dropped == 1, chkDRDropped, "inventory", short(created.EventID), processed, dropped)
		r.checkStates(b, "pending_inventory", "", "")
		r.checkNothingHeld(chkDRNothing, o.OrderID, b.Reservation)
		r.checkNothingCharged(b)
		r.Verdict = "WRONG WAY (the dedupe record in its own transaction): the inbox row committed, the consumer " +
			"crashed before the business change, and the broker's redelivery was dropped as already processed: the " +
			"event is marked done, nothing was reserved, the order is stuck in pending_inventory. Committing the " +
			"inbox row and the business change in one transaction is what prevents this."
		return nil
	}
	b, err := l.settle(ctx, r, "after the restart (the redelivery applied)", o.OrderID, sku, qty, nil)
	if err != nil {
		return err
	}
	processed, dropped := l.told(ctx, "inventory", created.EventID).inbox("inventory")
	r.check(processed == 1 && dropped == 0 && b.inboxRows("inventory", created.EventID) == 1, chkDRRolledBack,
		"inventory", short(created.EventID), processed, dropped, b.inboxRows("inventory", created.EventID))
	r.Verdict = "held: the inbox row and the business change are one transaction; the crash between them rolled both " +
		"back, the unacked message came back and was applied once."
	return nil
}

// --- commit, then publish (面试问答 1) ---------------------------------------

func commitThenPublish(ctx context.Context, l *Lab, r *Report, wrong bool) error {
	const sku, qty = "SKU-2", 1
	point := "order.create.after-commit"
	l.begin(ctx, r, sku)
	o, replayed, err := l.createThroughCrash(ctx, r, point, key("commit"), sku, qty)
	if err != nil {
		return err
	}
	r.check(replayed, chkCPCommitted, o.OrderID)
	if wrong {
		b, err := l.watchBooks(ctx, fmt.Sprintf("%s: longer than the right way needs to deliver", watchFor), o.OrderID)
		if err != nil {
			return err
		}
		r.Sections = append(r.Sections, l.snapshot(ctx, "after the restart (wrong way: published after COMMIT, no outbox)", o.OrderID, sku))
		r.checkStates(b, "pending_inventory", "", "")
		r.check(len(b.Outbox["order"]) == 0, chkCPNoOutbox, len(b.Outbox["order"]), o.OrderID)
		r.check(len(b.Inbox) == 0 && b.Reservation.Status == "", chkCPNeverHeard, len(b.Inbox), orNone(b.Reservation.Status))
		r.checkNothingHeld(chkCPNothing, o.OrderID, b.Reservation)
		r.checkNothingCharged(b)
		r.Verdict = "WRONG WAY (publish after COMMIT, no outbox): the order committed and the process died before " +
			"its publish; nothing records that an event is owed, so no restart, retry or dispatcher sends it: the " +
			"order waits in pending_inventory and inventory never hears of it (only the deadline or reconciliation " +
			"finds it). The outbox row, committed with the order, is what prevents this."
		return nil
	}
	b, err := l.settle(ctx, r, "after the restart (the dispatcher found the pending event)", o.OrderID, sku, qty, nil)
	if err != nil {
		return err
	}
	created, _ := b.outboxRow("order", events.OrderCreated)
	// Sent, at whichever attempt: on a loaded machine the old process's
	// poll may have claimed the row in the instant before its kill, and
	// then lease recovery sends it at the second.
	r.check(created.Status == "sent", chkCPWaited, short(created.EventID), created.Attempts)
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
	l.begin(ctx, r, sku)
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
	r.check(code == http.StatusAccepted && o.Status == "pending_inventory", chkSYAtOnce, code, o.Status, took.Round(time.Millisecond))
	if err := l.waitPaused(ctx, "inventory to be busy with the reservation", "inventory", point); err != nil {
		return err
	}
	mid, _ := l.reservation(ctx, o.OrderID)
	cur, _, _ := l.order(ctx, o.OrderID)
	r.Sections = append(r.Sections, l.snapshot(ctx, "inventory is slow; the caller already has its answer", o.OrderID, sku))
	r.check(cur.Status == "pending_inventory", chkSYStillTrue, o.OrderID, cur.Status)
	r.checkNothingHeld(chkSYNothing, o.OrderID, mid)
	if err := l.release(ctx, "inventory", point); err != nil {
		return err
	}
	if _, err := l.settle(ctx, r, "after inventory finished", o.OrderID, sku, qty, nil); err != nil {
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
	l.begin(ctx, r, sku)
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
	r.check(code == http.StatusGatewayTimeout, chkSYTold, code)
	fp, _ := l.failpoint(ctx, "inventory", point)
	r.check(fp.Hits == 1, chkSYCommitted, point, fp.Hits)
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
	r.Sections = append(r.Sections, l.snapshot(ctx, "after the timeout: the caller got 504, inventory had reserved", oid, sku))
	r.check(b.Reservation.Status == "reserved" && reserves(b.Reservation, sku, qty), chkSYHeld, oid, lines(b.Reservation))
	r.check(b.Order.Status == "pending_inventory" && len(b.Outbox["order"]) == 0, chkSYWaits, oid, orNone(b.Order.Status), len(b.Outbox["order"]))
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
	r.check(res.Status == "reserved" && code == http.StatusAccepted && hdr.Get("Idempotent-Replayed") == "true" && again.OrderID == oid,
		chkSYOneOrder, oid, orNone(res.Status), code, again.OrderID, hdr.Get("Idempotent-Replayed"))
	if err := l.disarm(ctx, "inventory", held); err != nil { // inventory's result event goes; the saga finishes the step
		return err
	}
	if _, err := l.settle(ctx, r, "after recovery (inventory's event finished the saga)", oid, sku, qty,
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
