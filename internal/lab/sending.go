package lab

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/outbox"
)

// The rows of the chapter's recovery table (崩溃之后怎么恢复) that the
// experiment table leaves out, and the unroutable return of 什么时候标记
// sent: each interrupts the dispatcher between its claim and its mark.

// --- after claim, before publish (认领后、发送前) ---------------------------

func claimCrash(ctx context.Context, l *Lab, r *Report, _ bool) error {
	const sku, qty = "SKU-2", 1
	const point = "outbox.dispatch.after-claim"
	l.begin(ctx, r, sku)
	o, _, err := l.createThroughCrash(ctx, r, point, key("claim"), sku, qty)
	if err != nil {
		return err
	}
	claimed, err := l.outboxEvent(ctx, "order", o.OrderID, events.OrderCreated)
	if err != nil {
		return err
	}
	res, _ := l.reservation(ctx, o.OrderID)
	r.Sections = append(r.Sections, l.snapshot(ctx, "after the crash (claimed, nothing published)", o.OrderID, sku))
	r.check(claimed.Status == outbox.StatusSending && claimed.Attempts == 1 && claimed.ClaimToken != nil && claimed.LeaseUntil != nil,
		chkCCSending, short(claimed.EventID), claimed.Status, claimed.Attempts, clock(claimed.LeaseUntil))
	r.check(res.Status == "", chkCCUnseen, orNone(res.Status))
	r.checkNothingHeld(chkCCNothing, o.OrderID, res)

	// Recovery hands the row back as a failed attempt, due after a backoff;
	// the next claim sends it. The pending moment lasts at least half a
	// second (the backoff's floor); it is recorded when seen.
	var requeued OutboxRow
	if err := l.waitFor(ctx, "the lease to expire and recovery to hand the row back", func() (bool, error) {
		ev, err := l.outboxEvent(ctx, "order", o.OrderID, events.OrderCreated)
		if err != nil {
			return false, err
		}
		requeued = ev
		return ev.Status != outbox.StatusSending || ev.ClaimToken == nil || *ev.ClaimToken != *claimed.ClaimToken, nil
	}); err != nil {
		return err
	}
	if requeued.Status == outbox.StatusPending {
		r.Sections = append(r.Sections, l.snapshot(ctx, "the lease expired: re-queued as a failed attempt, due after a backoff", o.OrderID, sku))
	}
	b, err := l.settle(ctx, r, "after recovery (sent once by the next claim)", o.OrderID, sku, qty, nil)
	if err != nil {
		return err
	}
	sent, _ := b.outboxRow("order", events.OrderCreated)
	due := sent.NextAttemptAt
	if requeued.Status == outbox.StatusPending {
		due = requeued.NextAttemptAt
	}
	r.check(sent.EventID == claimed.EventID && sent.Attempts == 2 && sent.TotalAttempts == 2,
		chkCCAttempt, short(sent.EventID), sent.Attempts, sent.TotalAttempts)
	r.check(due.After(*claimed.LeaseUntil) && sent.SentAt != nil && !sent.SentAt.Before(due),
		chkCCBackoff, clock(claimed.LeaseUntil), clock(&due), requeued.Status, clock(sent.SentAt))
	processed, dropped := l.told(ctx, "inventory", sent.EventID).inbox("inventory")
	r.check(processed == 1 && dropped == 0, chkCCSentOnce, "inventory", short(sent.EventID), processed, dropped)
	r.Verdict = "held: the crash after the claim left the row 'sending' under a claim nobody would finish; lease recovery " +
		"(status='sending' AND lease_until < NOW(6)) handed it back as a failed attempt with a backoff, and the next claim " +
		"sent it: nothing had been published, so it was delivered once and applied once."
	return nil
}

// --- published, confirm lost (broker 接收后、confirm 丢失) ------------------

func confirmLost(ctx context.Context, l *Lab, r *Report, _ bool) error {
	const sku, qty = "SKU-2", 2
	const point = "outbox.dispatch.after-publish-before-confirm"
	l.begin(ctx, r, sku)
	o, first, err := l.orderInto(ctx, trap{"order", point, "error", 1, "the dispatcher to publish and lose the confirm"}, key("confirm"), sku, qty)
	if err != nil {
		return err
	}
	r.Sections = append(r.Sections, l.snapshot(ctx, "after the fault (published, no confirm)", o.OrderID, sku))
	if _, err := l.waitLogged(ctx, "inventory to drop the copy sent again", "inventory", "inventory", logDuplicate, first.EventID, 1); err != nil {
		return err
	}
	b, err := l.settle(ctx, r, "after recovery (re-sent with the same event_id)", o.OrderID, sku, qty, nil)
	if err != nil {
		return err
	}
	sent, _ := b.outboxRow("order", events.OrderCreated)
	atOrder := l.told(ctx, "order", first.EventID)
	failed := atOrder.count("", logAttemptFailed)
	r.check(failed == 1 && strings.Contains(atOrder.errs(logAttemptFailed), point), chkCLLost,
		short(first.EventID), failed, atOrder.errs(logAttemptFailed))
	r.check(sent.EventID == first.EventID && sent.Attempts == 2 && sent.SentAt != nil && !sent.SentAt.Before(sent.NextAttemptAt),
		chkCLResent, short(sent.EventID), sent.Attempts, clock(&sent.NextAttemptAt), clock(sent.SentAt))
	processed, dropped := l.told(ctx, "inventory", first.EventID).inbox("inventory")
	r.check(processed == 1 && dropped == 1, chkCLDropped, "inventory", short(first.EventID), processed, dropped)
	r.Verdict = "held: the broker had the message but the confirm never came, so the outcome was unknown; the " +
		"dispatcher did not mark it sent but handed it back with a backoff and sent it again with the same event_id. " +
		"Inventory got it twice and its inbox key (consumer_name, event_id) dropped the second: stock reserved once."
	return nil
}

// --- unroutable (mandatory return) ---------------------------------------

// unroutableQueue is the queue bound to order.created (docs/contract.md,
// "Exchanges and queues"); the experiment unbinds it so that nothing
// receives the event.
const unroutableQueue = "inventory.order-events"

func unroutable(ctx context.Context, l *Lab, r *Report, _ bool) (err error) {
	const sku, qty = "SKU-2", 1
	l.begin(ctx, r, sku)
	if err := l.bind(ctx, unroutableQueue, events.OrderCreated, false); err != nil {
		return err
	}
	rebound := false
	defer func() { // whatever happens, give the stack its binding back
		if !rebound {
			if berr := l.bind(context.WithoutCancel(ctx), unroutableQueue, events.OrderCreated, true); berr != nil && err == nil {
				err = berr
			}
		}
	}()
	o, err := l.placeOrder(ctx, key("unroutable"), sku, qty)
	if err != nil {
		return err
	}
	row, err := returnedAndKept(ctx, l, r, o.OrderID, sku)
	if err != nil {
		return err
	}

	// Recovery: the binding comes back (a deploy finished, an operator
	// fixed it). A pending row goes at its next attempt; a failed one after
	// an operator's retry, which keeps its event_id and its history.
	rebound = true
	if err := l.bind(ctx, unroutableQueue, events.OrderCreated, true); err != nil {
		return err
	}
	if row.Status == outbox.StatusFailed {
		if err := retryFailedEvent(ctx, l, row.EventID); err != nil {
			return err
		}
	}
	b, err := l.settle(ctx, r, "after the binding came back", o.OrderID, sku, qty, nil)
	if err != nil {
		return err
	}
	sent, _ := b.outboxRow("order", events.OrderCreated)
	// Every attempt came back but the last, whenever the binding returned
	// between two of them: each failed attempt is a line of the order
	// service's log about the event.
	atOrder := l.told(ctx, "order", row.EventID)
	returned := atOrder.count("", logAttemptFailed) + atOrder.count("", logOutboxFailed)
	r.check(sent.EventID == row.EventID && sent.TotalAttempts == returned+1, chkURWent, short(sent.EventID), sent.TotalAttempts, returned)
	how := "at its next attempt"
	if row.Status == outbox.StatusFailed {
		how = "after it had failed at its limit and an operator retried it (POST /admin/outbox/{event_id}/retry)"
	}
	r.Verdict = "held: with no queue bound to order.created the broker returned the message (mandatory flag) before " +
		"acking it, so the dispatcher did not mark it sent: the row stayed in the outbox with its attempts and a " +
		"backoff, 'failed' (kept, alerted on) at its limit, never lost. Once the binding was back the same event_id " +
		"was delivered " + how + ", and applied once."
	return nil
}

// returnedAndKept waits for the broker to return the order's create (three
// times, or until the row fails at its limit) and checks that the outbox
// kept it, with its attempts and a backoff, and that nobody received it.
func returnedAndKept(ctx context.Context, l *Lab, r *Report, orderID, sku string) (OutboxRow, error) {
	var row OutboxRow
	if err := l.waitFor(ctx, "the event to come back unroutable three times, or to fail", func() (bool, error) {
		ev, err := l.outboxEvent(ctx, "order", orderID, events.OrderCreated)
		row = ev
		return ev.Status == outbox.StatusFailed || (ev.Status == outbox.StatusPending && ev.TotalAttempts >= 3), err
	}); err != nil {
		return row, err
	}
	if row.Status == outbox.StatusFailed {
		// The alert follows the row's release: wait for it.
		if _, err := l.waitLogged(ctx, "the failure to be alerted on", "order", "", logOutboxFailed, row.EventID, 1); err != nil {
			return row, err
		}
	}
	atOrder := l.told(ctx, "order", row.EventID)
	returned := atOrder.count("", logAttemptFailed) + atOrder.count("", logOutboxFailed)
	kept, err := l.books(ctx, orderID)
	if err != nil {
		return row, err
	}
	r.Sections = append(r.Sections, l.snapshot(ctx, "returned by the broker: kept, retried with a backoff", orderID, sku))
	r.check(returned >= 2 && strings.Contains(atOrder.errs(""), "unroutable"), chkURReturned, short(row.EventID), returned, atOrder.errs(""))
	r.check(row.SentAt == nil && row.TotalAttempts >= 2 && row.FirstAttemptAt != nil &&
		(row.Status == outbox.StatusFailed || row.NextAttemptAt.After(*row.FirstAttemptAt)),
		chkURKept, short(row.EventID), row.Status, row.TotalAttempts, clock(row.FirstAttemptAt), clock(&row.NextAttemptAt))
	r.checkStates(kept, "pending_inventory", "", "")
	r.checkNothingHeld(chkURNothing, orderID, kept.Reservation)
	r.check(kept.inboxRows("inventory", row.EventID) == 0, chkURNobody, kept.inboxRows("inventory", row.EventID))
	if row.Status == outbox.StatusFailed {
		alerts := atOrder.count("", logOutboxFailed)
		r.check(alerts == 1 && row.SentAt == nil, chkURFailed, short(row.EventID), alerts)
	}
	return row, nil
}

// retryFailedEvent is the operator's retry of a failed outbox row, which
// keeps its event_id and its history.
func retryFailedEvent(ctx context.Context, l *Lab, eventID string) error {
	code, _, err := l.call(ctx, "order", http.MethodPost, "/admin/outbox/"+eventID+"/retry", nil, nil, nil)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("POST /admin/outbox/%s/retry answered %d", eventID, code)
	}
	if err != nil {
		return err
	}
	l.step(Step{Kind: StepOperator, Service: "order", What: "retried the failed event " + short(eventID) + " (POST /admin/outbox/{event_id}/retry)"})
	return nil
}
