package lab

import (
	"context"
	"fmt"
	"net/http"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/outbox"
)

// The producer's windows of the chapter's experiment table: from the
// order's transaction to the broker (atomic commit, send recovery, the
// duplicate window, lease expiry).

// --- atomic commit -------------------------------------------------------

func atomicCommit(ctx context.Context, l *Lab, r *Report, wrong bool) error {
	const sku, qty = "SKU-2", 2
	const point = "order.create.after-order-insert"
	k := key("atomic")
	customer := "c-" + k // this run's own customer: the orders it may look at
	last, err := l.lastOrderID(ctx)
	if err != nil {
		return err
	}
	// The failed insert takes an auto-increment id and gives it up; the
	// answer (500) does not say which. The wrong way finds it by the
	// events that left for it; the right way checks every id up to the
	// retry's.
	next := fmt.Sprint(last + 1)
	l.step(Step{Kind: StepOrder, OrderID: next, What: "the id the failing create takes"})
	l.begin(ctx, r, sku)
	if err := l.wrongWayOn(ctx, r, "order"); err != nil {
		return err
	}
	if err := l.arm(ctx, "order", point, "error", 1); err != nil {
		return err
	}
	_, code, _, err := l.createOrder(ctx, k, customer, sku, qty)
	if err != nil {
		return err
	}
	fp, _ := l.failpoint(ctx, "order", point)
	r.check(fp.Hits == 1, chkACWindow, point, fp.Hits)
	r.check(code == http.StatusInternalServerError, chkACFailed, code)
	if wrong {
		return atomicCommitWrong(ctx, l, r, last, sku, qty)
	}

	r.Sections = append(r.Sections, l.snapshot(ctx, "after the fault", next, sku))
	b, err := l.books(ctx, next)
	if err != nil {
		return err
	}
	r.check(b.OrderCode == http.StatusNotFound, chkACNoRow, next, b.OrderCode)
	r.check(len(b.Outbox["order"]) == 0 && b.Reservation.Status == "", chkACNoOutbox, len(b.Outbox["order"]), next, orNone(b.Reservation.Status))
	r.checkNothingHeld(chkACNothing, next, b.Reservation)
	r.checkNothingCharged(b)

	// Recovery: the client retries with the same key; it is created once.
	o, code, hdr, err := l.createOrder(ctx, k, customer, sku, qty)
	if err != nil {
		return err
	}
	r.check(code == http.StatusAccepted && hdr.Get("Idempotent-Replayed") == "", chkACRetry, code, hdr.Get("Idempotent-Replayed"))
	var retryID uint64
	fmt.Sscan(o.OrderID, &retryID)
	// Other orders may have taken ids in between: only an order of this
	// run's customer, or an outbox row whose order does not exist, would
	// be the failed create's.
	var kept []string
	for id := last + 1; id < retryID; id++ {
		got, c, _ := l.order(ctx, fmt.Sprint(id))
		ev, _ := l.outbox(ctx, "order", fmt.Sprint(id))
		if (c == http.StatusOK && got.CustomerID == customer) || (c == http.StatusNotFound && len(ev) > 0) {
			kept = append(kept, fmt.Sprint(id))
		}
	}
	r.check(retryID > last && len(kept) == 0, chkACNoneGivenUp, last+1, retryID-1, customer, kept)
	if _, err := l.settle(ctx, r, "after recovery (client retry)", o.OrderID, sku, qty, nil); err != nil {
		return err
	}
	r.Verdict = "held: one local transaction (orders + order_items + " + outbox.Table + "). The fault rolled the order and " +
		"its OrderCreated back together; the client's retry with the same Idempotency-Key created it once."
	return nil
}

// atomicCommitWrong is the wrong way's end of atomic-commit: the event left
// before the transaction rolled back, and inventory and the PSP act on an
// order that does not exist. It looks for it among the ids past last that
// have no order row: the one inventory reserved for and the PSP charged.
func atomicCommitWrong(ctx context.Context, l *Lab, r *Report, last uint64, sku string, qty int) error {
	next := ""
	err := l.waitFor(ctx, "inventory and payment to act on the rolled-back order", func() (bool, error) {
		newest, err := l.lastOrderID(ctx)
		if err != nil {
			return false, err
		}
		for id := last + 1; id <= max(newest, last)+givenUpIDs; id++ {
			if _, c, err := l.order(ctx, fmt.Sprint(id)); err != nil || c != http.StatusNotFound {
				continue // an order that exists is not the rolled-back one
			}
			res, err := l.reservation(ctx, fmt.Sprint(id))
			if err != nil || res.Status == "" {
				continue
			}
			pay, err := l.payment(ctx, fmt.Sprint(id))
			if err == nil && pay.Status == "succeeded" {
				next = fmt.Sprint(id)
				l.step(Step{Kind: StepOrder, OrderID: next, What: "the id the failing create took"})
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	r.Sections = append(r.Sections, l.snapshot(ctx, "after the fault (wrong way: no outbox, published before COMMIT)", next, sku))
	b, err := l.books(ctx, next)
	if err != nil {
		return err
	}
	r.check(b.OrderCode == http.StatusNotFound && len(b.Outbox["order"]) == 0, chkACNoOrder, next, b.OrderCode, len(b.Outbox["order"]))
	r.check(b.Reservation.Status == "reserved" && reserves(b.Reservation, sku, qty), chkACHeld, next, lines(b.Reservation))
	paid := len(b.Charges) == 1 && b.Charges[0].Status == "succeeded" && b.Charges[0].AmountCents == b.Payment.AmountCents && b.Payment.AmountCents > 0
	r.check(paid && b.Payment.Status == "succeeded" && len(b.Refunds) == 0, chkACCharged,
		orNone(b.Payment.Status), b.Payment.AmountCents, charges(b.Charges), refunds(b.Refunds))
	r.Verdict = "WRONG WAY (publish before commit): the order rolled back but its event had already left; inventory " +
		"reserved stock and the PSP charged the customer for an order that does not exist. The outbox row, " +
		"committed in the same transaction as the order, is what prevents this."
	return nil
}

// --- send recovery -------------------------------------------------------

func sendRecovery(ctx context.Context, l *Lab, r *Report, _ bool) error {
	const sku, qty = "SKU-2", 1
	l.begin(ctx, r, sku)
	const point = "outbox.dispatch.before-claim"
	o, created, err := l.orderInto(ctx, trap{"order", point, "pause", 0, "the dispatcher to stop at " + point}, key("send"), sku, qty)
	if err != nil {
		return err
	}
	res, _ := l.reservation(ctx, o.OrderID)
	r.Sections = append(r.Sections, l.snapshot(ctx, "after the commit, dispatcher stopped", o.OrderID, sku))
	r.check(created.Status == "pending" && created.Attempts == 0, chkSRPending, short(created.EventID), created.Status, created.Attempts)
	r.check(res.Status == "", chkSRUnseen, orNone(res.Status))
	r.checkNothingHeld(chkSRNothing, o.OrderID, res)

	if err := l.disarm(ctx, "order", point); err != nil { // start the dispatcher again
		return err
	}
	b, err := l.settle(ctx, r, "after the dispatcher started again", o.OrderID, sku, qty, nil)
	if err != nil {
		return err
	}
	sent, _ := b.outboxRow("order", events.OrderCreated)
	r.check(sent.EventID == created.EventID && sent.Status == "sent" && sent.Attempts == 1 && b.inboxRows("inventory", created.EventID) == 1,
		chkSRDelivered, short(sent.EventID), sent.Status, sent.Attempts, b.inboxRows("inventory", created.EventID))
	r.Verdict = "held: the committed event waited as a 'pending' outbox row; when the dispatcher came back it claimed " +
		"it and delivered the original event (same event_id). Recovery job: the dispatcher's claim (woken after " +
		"commit, or the fallback poll)."
	return nil
}

// --- duplicate window ----------------------------------------------------

func duplicateWindow(ctx context.Context, l *Lab, r *Report, _ bool) error {
	const sku, qty = "SKU-2", 3
	const point = "outbox.dispatch.after-confirm-before-mark"
	k := key("dup")
	l.begin(ctx, r, sku)
	o, _, err := l.createThroughCrash(ctx, r, point, k, sku, qty)
	if err != nil {
		return err
	}
	crashed, err := l.outboxEvent(ctx, "order", o.OrderID, events.OrderCreated)
	if err != nil {
		return err
	}
	r.Sections = append(r.Sections, l.snapshot(ctx, "after the crash (confirmed by the broker, not marked sent)", o.OrderID, sku))
	r.check(crashed.Status == "sending" && crashed.Attempts == 1, chkDWStuck, crashed.Status, crashed.Attempts)

	if err := l.waitFor(ctx, "the lease to expire and the event to be re-sent", func() (bool, error) {
		ev, err := l.outboxEvent(ctx, "order", o.OrderID, events.OrderCreated)
		return ev.Status == "sent", err
	}); err != nil {
		return err
	}
	if _, err := l.waitLogged(ctx, "inventory to drop the second delivery", "inventory", "inventory", logDuplicate, crashed.EventID, 1); err != nil {
		return err
	}
	b, err := l.settle(ctx, r, "after recovery (lease expired, event re-sent)", o.OrderID, sku, qty, nil)
	if err != nil {
		return err
	}
	sent, _ := b.outboxRow("order", events.OrderCreated)
	r.check(sent.EventID == crashed.EventID && sent.Attempts == 2, chkDWTwice, short(sent.EventID), sent.Attempts)
	processed, dropped := l.told(ctx, "inventory", crashed.EventID).inbox("inventory")
	r.check(processed == 1 && dropped == 1, chkDWDropped, "inventory", short(crashed.EventID), processed, dropped)
	r.Verdict = "held: the crash after the confirm left the row 'sending'; lease recovery re-sent the same event_id and " +
		"the inventory inbox's primary key (consumer_name, event_id) dropped the duplicate: stock reserved once."
	return nil
}

// createThroughCrash arms the order service to crash (SIGKILL) at point
// (armCrash), then creates an order, which leads to point. The crash may beat
// the answer to the client: then the client retries with the same key, as
// a client would, once the service is back. It checks that the process
// really died in the window, and returns the order and whether the answer
// came from the retry, a replay of the key (Idempotent-Replayed).
func (l *Lab) createThroughCrash(ctx context.Context, r *Report, point, k, sku string, qty int) (Order, bool, error) {
	if err := l.armCrash(ctx, r, "order", point); err != nil {
		return Order{}, false, err
	}
	o, code, _, err := l.createOrder(ctx, k, "c-lab", sku, qty)
	if err := l.crashed(ctx, r, chkCrashed, "order", point); err != nil {
		return o, false, err
	}
	if err == nil && code == http.StatusAccepted {
		return o, false, nil
	}
	o, code, hdr, err := l.createOrder(ctx, k, "c-lab", sku, qty) // the client's retry: same key, same order
	if err != nil || code != http.StatusAccepted {
		return o, false, fmt.Errorf("create after the restart: %d %v", code, err)
	}
	return o, hdr.Get("Idempotent-Replayed") == "true", nil
}

// armCrash makes svc crash (SIGKILL) at the next hit of point, in a real
// process (Target.PrepareCrash), with the run's wrong-way switch on there.
func (l *Lab) armCrash(ctx context.Context, r *Report, svc, point string) error {
	if err := l.prepareCrash(ctx, svc); err != nil {
		return err
	}
	if err := l.wrongWayOn(ctx, r, svc); err != nil {
		return err
	}
	return l.arm(ctx, svc, point, "crash", 1)
}

// crashed waits until svc, armed to crash at point, has died there and a
// new process serves, and checks it (with label lb). AwaitRestart fails
// unless the process really died (and came back).
func (l *Lab) crashed(ctx context.Context, r *Report, lb Label, svc, point string) error {
	err := l.awaitRestart(ctx, svc)
	detail := "died at " + point + " (SIGKILL) and came back"
	if err != nil {
		detail = err.Error()
	}
	r.check(err == nil, lb, svc, detail)
	return err
}

// --- lease expiry --------------------------------------------------------

// The two dispatchers of the lease experiment stop at these points: A
// after its publish is confirmed (so its lease expires before it marks),
// B right after its own claim (so A's late mark meets B's live claim).
const (
	leasePointA = "outbox.dispatch.after-confirm-before-mark"
	leasePointB = "outbox.dispatch.after-claim"
)

func leaseExpiry(ctx context.Context, l *Lab, r *Report, wrong bool) error {
	// A sold-out SKU: inventory rejects the order, so the order service
	// emits no further event and its outbox holds only this OrderCreated.
	const sku, qty = "SKU-SOLDOUT", 1
	l.begin(ctx, r, sku)
	if err := l.wrongWayOn(ctx, r, "order"); err != nil {
		return err
	}
	o, a, tokenB, err := reclaimedByB(ctx, l, r, sku, qty)
	if err != nil {
		return err
	}
	tokenA := *a.ClaimToken
	if err := lateMarkOfA(ctx, l, r, wrong, o.OrderID, sku, tokenA, tokenB); err != nil {
		return err
	}
	if err := letBFinish(ctx, l, wrong, o.OrderID, a.EventID, tokenA); err != nil {
		return err
	}
	return leaseExpiryBooks(ctx, l, r, wrong, o.OrderID, sku, tokenA, tokenB)
}

// reclaimedByB places the order, pauses dispatcher A after its confirm
// and waits for A's lease to expire and dispatcher B to claim the row
// again. It returns the order, A's row (with A's claim) and B's token.
func reclaimedByB(ctx context.Context, l *Lab, r *Report, sku string, qty int) (Order, OutboxRow, string, error) {
	const pointA, pointB = leasePointA, leasePointB
	o, a, err := l.orderInto(ctx, trap{"order", pointA, "pause", 1, "dispatcher A to pause after the confirm"}, key("lease"), sku, qty)
	if err != nil {
		return o, a, "", err
	}
	if a.ClaimToken == nil {
		return o, a, "", fmt.Errorf("A's claim: %+v", a)
	}
	tokenA := *a.ClaimToken
	if err := l.arm(ctx, "order", pointB, "pause", 1); err != nil {
		return o, a, "", err
	}
	var b OutboxRow
	if err := l.waitFor(ctx, "A's lease to expire and dispatcher B to re-claim", func() (bool, error) {
		b, err = l.outboxEvent(ctx, "order", o.OrderID, events.OrderCreated)
		return err == nil && b.Status == "sending" && b.ClaimToken != nil && *b.ClaimToken != tokenA, err
	}); err != nil {
		fpA, _ := l.failpoint(ctx, "order", pointA)
		fpB, _ := l.failpoint(ctx, "order", pointB)
		return o, a, "", fmt.Errorf("%w (last row: %s, %d attempts, claim %v; A %+v; B %+v)", err, b.Status, b.Attempts, b.ClaimToken, fpA, fpB)
	}
	tokenB := *b.ClaimToken
	r.Sections = append(r.Sections, l.snapshot(ctx, "A paused with an expired lease; B holds a new claim", o.OrderID, sku))
	r.check(b.Attempts == 2, chkLEReclaimed, short(tokenB), short(tokenA), b.Attempts)
	return o, a, tokenB, nil
}

// lateMarkOfA lets A resume and try its mark-sent while B holds the claim:
// the right way changes nothing, the wrong way overwrites B's claim.
func lateMarkOfA(ctx context.Context, l *Lab, r *Report, wrong bool, orderID, sku, tokenA, tokenB string) error {
	if err := l.release(ctx, "order", leasePointA); err != nil { // A resumes and marks
		return err
	}
	var afterA OutboxRow
	var err error
	if err := l.waitFor(ctx, "A to try its mark-sent", func() (bool, error) {
		afterA, err = l.outboxEvent(ctx, "order", orderID, events.OrderCreated)
		return afterA.Status == "sent" || l.told(ctx, "order", tokenA).count("", logClaimLost) > 0, err
	}); err != nil {
		return err
	}
	r.Sections = append(r.Sections, l.snapshot(ctx, "A resumed and tried to mark the row sent", orderID, sku))
	if wrong {
		r.check(afterA.Status == "sent" && afterA.ClaimToken == nil, chkLEOverwrote, afterA.Status, short(tokenB))
	} else {
		r.check(afterA.Status == "sending" && afterA.ClaimToken != nil && *afterA.ClaimToken == tokenB, chkLEUnchanged, afterA.Status, short(tokenB))
	}
	return nil
}

// letBFinish releases B and waits for it to publish and mark, for the row
// to settle and for inventory to drop B's copy of the event.
func letBFinish(ctx context.Context, l *Lab, wrong bool, orderID, eventID, tokenA string) error {
	const pointB = leasePointB
	if err := l.release(ctx, "order", pointB); err != nil {
		return err
	}
	if err := l.waitOrder(ctx, orderID, "rejected"); err != nil {
		return err
	}
	if err := l.waitFor(ctx, "B to publish and mark", func() (bool, error) {
		fp, err := l.failpoint(ctx, "order", pointB)
		return fp.Hits >= 1 && fp.Paused == 0, err
	}); err != nil {
		return err
	}
	if err := l.waitFor(ctx, "the row to settle", func() (bool, error) {
		ev, err := l.outboxEvent(ctx, "order", orderID, events.OrderCreated)
		// The wrong way marks by event id alone: nobody ever sees a lost claim.
		return ev.Status == "sent" && (wrong || l.told(ctx, "order", tokenA).count("", logClaimLost) > 0), err
	}); err != nil {
		return err
	}
	_, err := l.waitLogged(ctx, "inventory to drop B's copy", "inventory", "inventory", logDuplicate, eventID, 1)
	return err
}

// leaseExpiryBooks checks the order's books once B finished: one effect,
// and the lost claim logged (the right way) or never noticed (the wrong
// way).
func leaseExpiryBooks(ctx context.Context, l *Lab, r *Report, wrong bool, orderID, sku, tokenA, tokenB string) error {
	bk, err := l.quietBooks(ctx, orderID)
	if err != nil {
		return err
	}
	r.Sections = append(r.Sections, l.snapshot(ctx, "after B finished", orderID, sku))
	created, _ := bk.outboxRow("order", events.OrderCreated)
	processed, dropped := l.told(ctx, "inventory", created.EventID).inbox("inventory")
	r.check(bk.Reservation.Status == "rejected" && bk.inboxRows("inventory", created.EventID) == 1 && processed == 1 && dropped == 1,
		chkLEOneEffect, orNone(bk.Reservation.Status), bk.inboxRows("inventory", created.EventID), "inventory", short(created.EventID), processed, dropped)
	// Sold out: one rejection, whoever marked the row.
	r.checkStates(bk, "rejected", "rejected", "")
	r.checkNothingHeld(chkLENothing, orderID, bk.Reservation)
	r.checkNothingCharged(bk)
	r.checkEvents(bk, Events{"order": {events.OrderCreated}, "inventory": {events.InventoryRejected}})
	r.checkConsumedOnce(bk)
	lostA, lostB := l.told(ctx, "order", tokenA).count("", logClaimLost), l.told(ctx, "order", tokenB).count("", logClaimLost)
	if wrong {
		r.check(lostA == 0 && lostB == 0, chkLENoticed, short(tokenA), lostA, short(tokenB), lostB)
		r.Verdict = "WRONG WAY (mark sent without the claim token): A, whose lease had expired, marked the row sent " +
			"while B owned it, so B's own mark found nothing to change: the table no longer says who did what. " +
			"The claim-token condition on mark-sent is what prevents this."
		return nil
	}
	r.check(lostA == 1 && lostB == 0, chkLEOneLost, short(tokenA), lostA, short(tokenB), lostB)
	r.Verdict = "held: mark-sent is conditional on event_id + claim_token + status='sending'; A's late mark changed 0 " +
		"rows (the order service logged A's claim as lost) and B's claim and state stood."
	return nil
}
