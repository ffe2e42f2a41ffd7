package lab

import (
	"fmt"
	"slices"
	"strings"
)

// This file is a table of data, longer than a function should be: every
// check a report can print, as the reader sees it in the terminal:
//
//	[ok  ] <What>: <Detail>
//
// The guides quote these lines (docs/docs_test.go finds every quote among
// Labels), and the viewer shows them. A check names only the experiment's
// own orders and events: its rows, its reservation and charges, what its
// services logged about its events (Lab.journal); never a service-wide
// counter or a SKU's total stock, which other traffic moves.

// Label is one check: What it claims and the format of its Detail, the
// evidence. What may hold fmt verbs too; Report.check fills What's first.
type Label struct {
	What   string `json:"what"`
	Detail string `json:"detail"`
}

var labels []Label

func label(what, detail string) Label {
	l := Label{What: what, Detail: detail}
	labels = append(labels, l)
	return l
}

// Labels lists every check an experiment can make, in the order of this
// file.
func Labels() []Label { return slices.Clone(labels) }

// verbs counts the fmt verbs of a format ("%%" is none).
func verbs(format string) int {
	n := 0
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		if i+1 < len(format) && format[i+1] == '%' {
			i++
			continue
		}
		n++
	}
	return n
}

// text fills l with args: What's verbs first, then Detail's.
func (l Label) text(args []any) (what, detail string) {
	n := min(verbs(l.What), len(args))
	what = l.What
	if n > 0 {
		what = fmt.Sprintf(l.What, args[:n]...)
	}
	return what, strings.TrimSpace(fmt.Sprintf(l.Detail, args[n:]...))
}

// Checks shared by several experiments (books.go).
var (
	chkStates       = label("state: order %s, reservation %s, payment %s", "order %s is %s, reservation %s, payment %s")
	chkPaidOnce     = label("amount: the order's total, charged once", "order total %d¢ (lines %s), payment %d¢, PSP charges %s, refunds %s")
	chkNothingPaid  = label("amount: nothing charged", "PSP charges %s, refunds %s (payment %s)")
	chkSoldOnce     = label("quantity: the order's stock was taken once", "reservation of order %s: %s, one row per order (its primary key)")
	chkEventsOnce   = label("side effects: each event written once and sent", "%s")
	chkConsumedOnce = label("side effects: each event processed once by each consumer", "%s")
	chkRan          = label("the experiment ran to the end", "%v")
	chkWrongWay     = label("wrong way", "%s has no wrong-way switch")
	chkCrashed      = label("the process crashed in the window", "%s %s")
)

// nothingHeld is the reservation detail of a check that the order holds no
// stock.
const nothingHeld = "reservation of order %s: %s"

// atomic-commit
var (
	chkACWindow      = label("the window was hit", "%s hit %d time(s)")
	chkACFailed      = label("the create failed", "POST /orders answered %d")
	chkACNoOrder     = label("anomaly: the order does not exist", "GET /orders/%s answered %d; %d order outbox row(s)")
	chkACHeld        = label("anomaly: inventory holds stock for it", nothingHeld)
	chkACCharged     = label("anomaly: the customer was charged for it", "payment %s %d¢, PSP charges %s, refunds %s")
	chkACNoRow       = label("state: no order row", "GET /orders/%s answered %d")
	chkACNoOutbox    = label("side effects: no outbox row, nothing at inventory", "%d outbox row(s) for order %s, reservation %s")
	chkACNothing     = label("quantity: nothing reserved", nothingHeld)
	chkACRetry       = label("the retry creates the order", "POST answered %d, replayed=%q: no order existed under the key")
	chkACNoneGivenUp = label("no order or event under any id given up",
		"ids %d to %d: none holds an order of this run's customer %s, none an outbox row without its order %v")
)

// send-recovery
var (
	chkSRPending   = label("the event waits as a pending row", "order.created %s is %s after %d attempts")
	chkSRUnseen    = label("inventory has not seen it", "reservation: %s")
	chkSRNothing   = label("quantity: nothing held while the event waits", nothingHeld)
	chkSRDelivered = label("the original event was delivered", "event %s is %s after %d attempt(s); %d inventory inbox row(s) for it")
)

// What a service's log says about one event (its journal): the inbox's
// outcomes at a consumer.
const inboxLog = "%s's log for event %s: processed %d time(s), %d copy(ies) dropped as duplicates"

// duplicate-window
var (
	chkDWStuck   = label("the row is stuck in 'sending' under the dead claim", "order.created is %s after %d attempt(s)")
	chkDWTwice   = label("the same event_id was sent twice", "event %s sent after %d attempts")
	chkDWDropped = label("the inbox dropped the second delivery", inboxLog)
)

// consume-recovery
var (
	chkCRWindow     = label("the window was hit", "inventory's log for event %s: %d attempt(s) failed (%s)")
	chkCRInbox      = label("the inbox row rolled back", "%d inbox row(s) for %s")
	chkCRRolledBack = label("the stock change and its event rolled back", "reservation of order %s: %s, %d inventory outbox row(s)")
	chkCRRetried    = label("the message was retried after a delay", "inventory's log for event %s: %d retry(ies) scheduled, then processed %d time(s)")
	chkCRLost       = label("anomaly: the event was lost", "%d inbox row(s), reservation %s, %d inventory outbox row(s)")
	chkCRNoRetry    = label("anomaly: no retry was ever scheduled", "inventory's log for event %s: %d retry(ies) scheduled, processed %d time(s)")
	chkCRNothing    = label("quantity: nothing reserved for the stuck order", nothingHeld)
)

// ack-lost
var (
	chkALWindow  = label("the window was hit: committed, then no ACK", "inventory processed event %s %d time(s); the inbox row is there (%d)")
	chkALRedeliv = label("the broker redelivered", "the order service sent event %s once (attempt %d); inventory got it %d time(s)")
	chkALDropped = label("the inbox dropped it", inboxLog)
)

// concurrent-duplicate
var (
	chkCDAtOnce    = label("two deliveries of one event_id at once", "event %s: a copy published while the first delivery was paused at %s (%d paused)")
	chkCDHeld      = label("the first delivery held the event until released", "inventory processed event %s at %s, released at %s")
	chkCDDuplicate = label("one delivery was a duplicate", inboxLog)
	chkCDNeverSaw  = label("anomaly: the inbox never recognised the duplicate", inboxLog)
	chkCDBothRan   = label("anomaly: both deliveries ran as new events", inboxLog)
	chkCDHidden    = label("and INSERT IGNORE hid it", "%d inbox row(s) for two processed deliveries")
)

// lease-expiry
var (
	chkLEReclaimed = label("B re-claimed after A's lease expired", "claim %s replaced %s, attempt %d")
	chkLEUnchanged = label("A changed nothing", "the row is still %s under B's claim %s")
	chkLEOverwrote = label("anomaly: A overwrote B's claim", "the row became %s with no claim token while B still held claim %s")
	chkLEOneEffect = label("both copies reached inventory, one took effect", "reservation %s, %d inbox row(s) for the event; "+inboxLog)
	chkLENothing   = label("quantity: nothing held for the rejected order", nothingHeld)
	chkLENoticed   = label("anomaly: neither dispatcher noticed", "the order service's log: claim %s lost %d time(s), claim %s lost %d time(s)")
	chkLEOneLost   = label("exactly one dispatcher lost its claim", "the order service's log: claim %s (A) lost %d time(s), claim %s (B) lost %d time(s)")
)

// out-of-order
var (
	chkOOMarker      = label("the cancel left a marker", "reservation: %s")
	chkOOGap         = label("the gap was recorded", "%d gap record(s) for order %s")
	chkOOHeld        = label("anomaly: stock held for a cancelled order", "order %s is %s, reservation %s")
	chkOOToldSaga    = label("anomaly: and told the saga it was reserved", "inventory's outbox: %d row(s), inventory.reserved: %v")
	chkOONotRevived  = label("the order was not resurrected", "order %s is %s")
	chkOOLateNothing = label("quantity: the late create reserved nothing", nothingHeld)
	chkOOGapClosed   = label("the gap record was closed", "%d gap record(s), resolved: %v")
)

// claim-crash
var (
	chkCCSending  = label("the row is 'sending' under the dead claim, its lease running", "order.created %s is %s, attempt %d, lease until %s")
	chkCCUnseen   = label("state: inventory has not seen it", "reservation %s")
	chkCCNothing  = label("quantity: nothing held while the row is claimed", nothingHeld)
	chkCCAttempt  = label("the expired lease counted as an attempt", "event %s sent at attempt %d (%d in all)")
	chkCCBackoff  = label("re-queued with a backoff, not at once", "lease ended %s, due again %s (first seen: %s), sent %s")
	chkCCSentOnce = label("side effects: delivered once, no duplicate to drop", inboxLog)
)

// confirm-lost
var (
	chkCLLost    = label("the confirm was lost once", "the order service's log for event %s: %d failed attempt(s) (%s)")
	chkCLResent  = label("never marked sent on the unknown outcome: re-sent with the same event_id after a backoff", "event %s sent at attempt %d, due %s, sent %s")
	chkCLDropped = label("the inbox dropped the copy", inboxLog)
)

// unroutable
var (
	chkURReturned = label("the broker returned it (mandatory publish)", "the order service's log for event %s: %d attempt(s) returned (%s)")
	chkURKept     = label("never marked sent: kept, and retried later, not at once", "order.created %s is %s after %d attempt(s), first %s, due again %s")
	chkURNothing  = label("quantity: nothing reserved while the event cannot be routed", nothingHeld)
	chkURNobody   = label("side effects: nobody received it", "%d inventory inbox row(s)")
	chkURFailed   = label("failed after its limit: kept for an operator, alerted on", "the order service's log for event %s: %d alert(s) \"outbox event failed\"")
	chkURWent     = label("the same event went, at the attempt after the last return", "event %s sent after %d attempt(s) in all, %d of them returned")
)

// dedupe-record
var (
	chkDRCrashed    = label("the consumer crashed between the inbox INSERT and the business change", "%s %s")
	chkDRMarked     = label("anomaly: the event is marked processed", "%d inventory inbox row(s) for %s")
	chkDRMissing    = label("anomaly: its effect is missing", "reservation %s, %d inventory outbox row(s)")
	chkDRDropped    = label("anomaly: the redelivery was dropped as already processed", inboxLog+" (since the restart)")
	chkDRNothing    = label("quantity: nothing reserved for the order", nothingHeld)
	chkDRRolledBack = label("the crash rolled the inbox row back with the change: the redelivery was applied, not dropped",
		inboxLog+" (since the restart); %d inbox row(s)")
)

// delta-parking and delta-overdue
var (
	chkDPParked  = label("state: v2 parked, waiting for version 1", "parked record of v2: waiting for v%d, applied %s")
	chkDPNotYet  = label("quantity: nothing applied ahead of the gap", "inbox rows: v1 %d, v2 %d")
	chkDPWaiting = label("side effects: acked as a waiting task, not processed, not retried", "%s's log for v2: parked %d time(s), processed %d, retried %d")
	chkDPOnce    = label("quantity: each note applied once", "inbox rows: v1 %d, v2 %d: +%d and +%d %s, each once")
	chkDPInOrder = label("state: v1, then the parked v2, in order", "v1 at %s, v2 at %s; parked v2 applied %s")
	chkDPCopy    = label("side effects: a copy of an applied note changes nothing", "%d inbox row(s) for v2; "+inboxLog)
	chkDOAlerted = label("the alert fired after the deadline", "deadline %s, alerted %s; %s's log for v2: %d alert(s)")
	chkDOKept    = label("state: the parked record is kept as the recovery record", "v2 still parked (applied %s), %d inbox row(s)")
	chkDONotSkip = label("quantity: the gap is never skipped", "inbox rows: v1 %d, v2 %d")
	chkDOOnce    = label("side effects: alerted once", "alerted_at %s, a round later %s; %d alert(s) in %s's log")
	chkDOCleared = label("the alert cleared", "the parked v2 was applied at %s: no longer overdue")
)

// commit-then-publish
var (
	chkCPCommitted  = label("the order was committed before the crash", "the client's retry with the same key found order %s (Idempotent-Replayed)")
	chkCPNoOutbox   = label("anomaly: no table says an event is owed", "%d outbox row(s) for order %s")
	chkCPNeverHeard = label("anomaly: inventory never heard of the order", "%d inbox row(s), reservation %s")
	chkCPNothing    = label("quantity: nothing reserved", nothingHeld)
	chkCPWaited     = label("the event waited in the outbox and was sent after the restart", "order.created %s sent at attempt %d")
)

// sync-reserve
var (
	chkSYAtOnce    = label("the request answered at once: accepted, not failed", "POST /orders answered %d %s in %s")
	chkSYStillTrue = label("state: the caller's answer is still true", "order %s is %s")
	chkSYNothing   = label("quantity: nothing held until inventory commits", nothingHeld)
	chkSYTold      = label("anomaly: the caller was told the order failed", "POST /orders answered %d")
	chkSYCommitted = label("inventory had reserved and committed before the timeout", "%s hit %d time(s)")
	chkSYHeld      = label("anomaly: stock held for an order the caller believes failed", nothingHeld)
	chkSYWaits     = label("state: the order waits, with no event of its own", "order %s is %s, %d order outbox row(s)")
	chkSYOneOrder  = label("the status query and the key find the one order: no second order, no second hold",
		"GET /reservations/%s: %s; the retry answered %d with order %s (replayed %q)")
)
