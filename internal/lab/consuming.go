package lab

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/relmsg/ordersaga/pkg/aids/wrongway"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox"
)

// The consumer's windows of the chapter's experiment table: from the
// delivery to the ACK (consume recovery, ACK lost, concurrent duplicate,
// out of order).

// --- consume recovery ----------------------------------------------------

func consumeRecovery(ctx context.Context, l *Lab, r *Report, wrong bool) error {
	const sku, qty = "SKU-2", 2
	const point = "inbox.after-effect-before-commit"
	l.begin(ctx, r, sku)
	count := 0 // every hit: the retries keep failing until we disarm
	if wrong {
		count = 1
		if err := l.setWrongWay(ctx, "inventory", string(wrongway.AckBeforeCommit)); err != nil {
			return err
		}
	}
	o, created, err := l.orderInto(ctx, trap{"inventory", point, "error", count, "inventory to fail inside its transaction"}, key("consume"), sku, qty)
	if err != nil {
		return err
	}

	if wrong {
		// The message was acked before the transaction failed: nothing
		// will bring it back. Watch for longer than the right way needs to
		// recover (its first retry comes within about a second).
		b, err := l.watchBooks(ctx, fmt.Sprintf("%s: longer than the right way needs to retry", watchFor), o.OrderID)
		if err != nil {
			return err
		}
		told := l.told(ctx, "inventory", created.EventID)
		retried, processed := told.count("inventory", logRetry), told.count("inventory", logProcessed)
		r.Sections = append(r.Sections, l.snapshot(ctx, "3 s after the fault (wrong way: ACK before COMMIT)", o.OrderID, sku))
		r.check(b.inboxRows("inventory", created.EventID) == 0 && b.Reservation.Status == "" && len(b.Outbox["inventory"]) == 0,
			chkCRLost, b.inboxRows("inventory", created.EventID), orNone(b.Reservation.Status), len(b.Outbox["inventory"]))
		r.check(retried == 0 && processed == 0, chkCRNoRetry, short(created.EventID), retried, processed)
		r.checkStates(b, "pending_inventory", "", "")
		r.checkNothingHeld(chkCRNothing, o.OrderID, b.Reservation)
		r.checkNothingCharged(b)
		r.Verdict = "WRONG WAY (ACK before COMMIT): the consumer acked, then its transaction failed; the broker had " +
			"already forgotten the message, so no retry ever came and the order is stuck in pending_inventory " +
			"(only reconciliation could find it). ACK after COMMIT is what prevents this."
		return nil
	}

	// The failed attempt's log line follows its rollback: wait for it.
	told, err := l.waitLogged(ctx, "inventory to log the failed attempt", "inventory", "inventory", logRetry, created.EventID, 1)
	if err != nil {
		return err
	}
	in, _ := l.inbox(ctx, "inventory", []string{created.EventID})
	res, _ := l.reservation(ctx, o.OrderID)
	inv, _ := l.outbox(ctx, "inventory", o.OrderID)
	r.Sections = append(r.Sections, l.snapshot(ctx, "after the fault (business SQL ran, then the error)", o.OrderID, sku))
	failed := told.count("inventory", logRetry)
	r.check(failed >= 1 && strings.Contains(told.errs(logRetry), point), chkCRWindow, short(created.EventID), failed, told.errs(logRetry))
	r.check(len(in) == 0, chkCRInbox, len(in), short(created.EventID))
	r.check(holdsNothing(res) && res.Status == "" && len(inv) == 0, chkCRRolledBack, o.OrderID, lines(res), len(inv))

	if err := l.disarm(ctx, "inventory", point); err != nil {
		return err
	}
	if _, err := l.settle(ctx, r, "after recovery (delayed retry)", o.OrderID, sku, qty, nil); err != nil {
		return err
	}
	told = l.told(ctx, "inventory", created.EventID)
	retried, processed := told.count("inventory", logRetry), told.count("inventory", logProcessed)
	r.check(retried >= 1 && processed == 1, chkCRRetried, short(created.EventID), retried, processed)
	r.Verdict = "held: the inbox row and the stock change are one transaction; the fault rolled both back, the message " +
		"was not acked, and the delayed retry (backoff with jitter) applied them once."
	return nil
}

// --- ACK lost ------------------------------------------------------------

func ackLost(ctx context.Context, l *Lab, r *Report, _ bool) error {
	const sku, qty = "SKU-2", 1
	const point = "inbox.after-commit-before-ack"
	l.begin(ctx, r, sku)
	o, created, err := l.orderInto(ctx, trap{"inventory", point, "error", 1, "inventory to commit and lose its ACK"}, key("ack"), sku, qty)
	if err != nil {
		return err
	}
	r.Sections = append(r.Sections, l.snapshot(ctx, "after the fault (committed, channel closed before the ACK)", o.OrderID, sku))
	if _, err := l.waitLogged(ctx, "the redelivery to be dropped", "inventory", "inventory", logDuplicate, created.EventID, 1); err != nil {
		return err
	}
	b, err := l.settle(ctx, r, "after recovery (channel closed without ACK, message redelivered)", o.OrderID, sku, qty, nil)
	if err != nil {
		return err
	}
	sent, _ := b.outboxRow("order", events.OrderCreated)
	processed, dropped := l.told(ctx, "inventory", created.EventID).inbox("inventory")
	rows := b.inboxRows("inventory", created.EventID)
	r.check(processed == 1 && rows == 1, chkALWindow, short(created.EventID), processed, rows)
	r.check(sent.Attempts == 1 && processed+dropped == 2, chkALRedeliv, short(created.EventID), sent.Attempts, processed+dropped)
	r.check(dropped == 1, chkALDropped, "inventory", short(created.EventID), processed, dropped)
	r.Verdict = "held: the transaction committed but the ACK never left; the broker redelivered the message and the " +
		"inbox primary key turned it into a duplicate, acked without effect."
	return nil
}

// --- concurrent duplicate ------------------------------------------------

// copyLands is how long the lab gives its copy of an event, confirmed by
// the broker, to reach the consumer: the right way, it then waits there on
// the first delivery's uncommitted inbox key.
const copyLands = 300 * time.Millisecond

func concurrentDuplicate(ctx context.Context, l *Lab, r *Report, wrong bool) error {
	const sku, qty = "SKU-2", 2
	const point = "inbox.after-claim"
	l.begin(ctx, r, sku)
	if err := l.wrongWayOn(ctx, r, "inventory"); err != nil {
		return err
	}
	o, created, err := l.orderInto(ctx, trap{"inventory", point, "pause", 1, "the first delivery to hold the event"}, key("concurrent"), sku, qty)
	if err != nil {
		return err
	}
	// A second copy of the same event (same event_id), as a re-send would.
	if err := l.publish(ctx, EnvelopeOf(created)); err != nil {
		return err
	}
	l.step(Step{Kind: StepWaiting, What: "the copy to reach inventory"})
	time.Sleep(copyLands)
	l.step(Step{Kind: StepWaited, What: "the copy to reach inventory", Seconds: copyLands.Seconds()})
	r.Sections = append(r.Sections, l.snapshot(ctx, "both deliveries in flight (first paused after its inbox claim)", o.OrderID, sku))
	held, _ := l.failpoint(ctx, "inventory", point)
	r.check(held.Paused == 1, chkCDAtOnce, short(created.EventID), point, held.Paused)
	released := time.Now()
	if err := l.release(ctx, "inventory", point); err != nil {
		return err
	}
	if err := l.waitFor(ctx, "both deliveries to settle", func() (bool, error) {
		processed, dropped := l.told(ctx, "inventory", created.EventID).inbox("inventory")
		return processed+dropped >= 2, nil
	}); err != nil {
		return err
	}
	// Both ways end in one sale: the right way by the inbox key, the wrong
	// way only by the reservations table's own key.
	b, err := l.settle(ctx, r, "after both deliveries", o.OrderID, sku, qty, nil)
	if err != nil {
		return err
	}
	told := l.told(ctx, "inventory", created.EventID)
	processed, dropped := told.inbox("inventory")
	if wrong {
		r.check(dropped == 0, chkCDNeverSaw, "inventory", short(created.EventID), processed, dropped)
		r.check(processed == 2, chkCDBothRan, "inventory", short(created.EventID), processed, dropped)
		r.check(b.inboxRows("inventory", created.EventID) == 1, chkCDHidden, b.inboxRows("inventory", created.EventID))
		r.Verdict = "WRONG WAY (check-then-insert): both deliveries saw \"not processed\" and both ran the business " +
			"logic; INSERT IGNORE then hid the clash. Only the reservations table's own primary key kept the stock " +
			"right this time; a consumer whose effect has no such key applies it twice " +
			"(TestExperimentConcurrentDuplicateDoubleEffect shows it)."
		return nil
	}
	first, ok := told.first("inventory", logProcessed)
	r.check(ok && !first.At.Before(released), chkCDHeld, short(created.EventID), clock(&first.At), clock(&released))
	r.check(processed == 1 && dropped == 1, chkCDDuplicate, "inventory", short(created.EventID), processed, dropped)
	r.Verdict = "held: the second delivery's INSERT into " + inbox.Table + " waited on the first one's uncommitted key, then " +
		"failed with a duplicate key once the first committed: one effect, one inbox row."
	return nil
}

// --- out of order --------------------------------------------------------

func outOfOrder(ctx context.Context, l *Lab, r *Report, wrong bool) error {
	const sku, qty = "SKU-2", 4
	l.begin(ctx, r, sku)
	if err := l.wrongWayOn(ctx, r, "inventory"); err != nil {
		return err
	}
	o, err := cancelBeforeCreate(ctx, l, sku, qty)
	if err != nil {
		return err
	}
	res, _ := l.reservation(ctx, o.OrderID)
	r.Sections = append(r.Sections, l.snapshot(ctx, "after the cancel overtook the create", o.OrderID, sku))
	r.check(res.Status == "cancelled_before_reserve", chkOOMarker, orNone(res.Status))
	gaps, _ := l.gaps(ctx, o.OrderID)
	if !wrong { // the wrong way keeps no gap records either
		r.check(len(gaps) == 1, chkOOGap, len(gaps), o.OrderID)
	}

	if err := l.waitFor(ctx, "the create's lease to expire and the create to arrive late", func() (bool, error) {
		ev, err := l.outboxEvent(ctx, "order", o.OrderID, events.OrderCreated)
		if err != nil || ev.Status != "sent" {
			return false, err
		}
		in, err := l.inbox(ctx, "inventory", []string{ev.EventID})
		return len(in) == 1, err
	}); err != nil {
		return err
	}
	if wrong {
		return lateCreateApplied(ctx, l, r, o.OrderID, sku, qty)
	}
	return lateCreateIgnored(ctx, l, r, o.OrderID, sku)
}

// cancelBeforeCreate places an order whose create is held back and cancels
// it: the create's first dispatch fails after its claim, so it stays
// 'sending' until its lease expires, and the cancel overtakes it. It
// returns once inventory has seen the cancel.
func cancelBeforeCreate(ctx context.Context, l *Lab, sku string, qty int) (Order, error) {
	const point = "outbox.dispatch.after-claim"
	o, _, err := l.orderInto(ctx, trap{"order", point, "error", 1, "the create to be held back"}, key("order"), sku, qty)
	if err != nil {
		return o, err
	}
	code, _, err := l.call(ctx, "order", http.MethodPost, "/orders/"+o.OrderID+"/cancel",
		map[string]string{"Idempotency-Key": key("cancel")}, map[string]string{"reason": "lab: cancel before create"}, nil)
	if err != nil || code != http.StatusAccepted {
		return o, fmt.Errorf("cancel: %d %v", code, err)
	}
	l.step(Step{Kind: StepCancel, OrderID: o.OrderID})
	return o, l.waitFor(ctx, "inventory to see the cancel first", func() (bool, error) {
		res, err := l.reservation(ctx, o.OrderID)
		return res.Status != "", err
	})
}

// lateCreateApplied is the wrong way's ending: inventory ignores the
// order of events, so the late create reserves stock for a cancelled
// order.
func lateCreateApplied(ctx context.Context, l *Lab, r *Report, orderID, sku string, qty int) error {
	err := l.waitFor(ctx, "inventory to reserve for the cancelled order", func() (bool, error) {
		res, err := l.reservation(ctx, orderID)
		return res.Status == "reserved" || res.Status == "committed", err
	})
	if err != nil {
		return err
	}
	b, err := l.quietBooks(ctx, orderID)
	if err != nil {
		return err
	}
	r.Sections = append(r.Sections, l.snapshot(ctx, "after the late create (wrong way: order ignored)", orderID, sku))
	r.check(b.Order.Status == "cancelled" && b.Reservation.Status == "reserved" && reserves(b.Reservation, sku, qty),
		chkOOHeld, orderID, b.Order.Status, lines(b.Reservation))
	_, reserved := b.outboxRow("inventory", events.InventoryReserved)
	r.check(reserved, chkOOToldSaga, len(b.Outbox["inventory"]), reserved)
	r.checkNothingCharged(b) // payment's own cancel marker held
	r.Verdict = "WRONG WAY (ignore order): the late create was applied after its cancel and reserved stock for a " +
		"cancelled order (and set the rest of the saga going). The cancel marker and state-transition checks are " +
		"what prevent this."
	return nil
}

// lateCreateIgnored is the right way's ending: the late create finds the
// cancel's marker and changes nothing, and the gap it filled is closed.
func lateCreateIgnored(ctx context.Context, l *Lab, r *Report, orderID, sku string) error {
	if err := l.waitFor(ctx, "payment to record the cancel", func() (bool, error) {
		pay, err := l.payment(ctx, orderID)
		return pay.Status != "", err
	}); err != nil {
		return err
	}
	b, err := l.quietBooks(ctx, orderID)
	if err != nil {
		return err
	}
	gaps, _ := l.gaps(ctx, orderID)
	r.Sections = append(r.Sections, l.snapshot(ctx, "after the late create arrived", orderID, sku))
	r.check(b.Order.Status == "cancelled", chkOONotRevived, orderID, b.Order.Status)
	r.checkStates(b, "cancelled", "cancelled_before_reserve", "cancelled_before_charge")
	r.checkNothingHeld(chkOOLateNothing, orderID, b.Reservation)
	r.checkNothingCharged(b)
	r.checkEvents(b, Events{"order": {events.OrderCreated, events.OrderCancelled}})
	r.checkConsumedOnce(b)
	resolved := len(gaps) == 1 && gaps[0].ResolvedAt != nil
	r.check(resolved, chkOOGapClosed, len(gaps), resolved)
	r.Verdict = "held: inbox dedupe does not fix ordering; the cancel left a marker (null compensation), the gap was " +
		"recorded, and the late create found the marker and changed nothing (no hanging reservation)."
	return nil
}

// Gap is a recorded ordering gap.
type Gap struct {
	AggregateID string     `json:"aggregate_id"`
	EventType   string     `json:"event_type"`
	ResolvedAt  *time.Time `json:"resolved_at"`
	Resolution  string     `json:"resolution"`
}

func (l *Lab) gaps(ctx context.Context, orderID string) ([]Gap, error) {
	var out struct {
		Gaps []Gap `json:"gaps"`
	}
	if err := l.get(ctx, "inventory", "/admin/gaps?aggregate_id="+orderID, &out); err != nil {
		return nil, err
	}
	return out.Gaps, nil
}
