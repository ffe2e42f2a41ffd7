package order

import "fmt"

// Reconciliation (chapter: 对账：验证业务闭环). Queues at zero do not prove a
// saga closed: a message can be routed nowhere, acked too early, or
// recorded wrongly ("下游记录了错误状态"). The reconciler starts from the
// authoritative business data (orders still open after a grace window,
// refunds still pending, and orders that finished within a recent window),
// asks each participant what it recorded, and Classify decides, from that
// evidence alone, what went wrong and which idempotent entry point repairs
// it. It is a pure function so that every combination is a table-driven
// test.

// Classification is what the reconciler concluded about one order.
type Classification string

const (
	// EventNotSent: an event that should have moved the saga on is still in
	// an outbox (ours: pending or failed; a participant's: failed).
	EventNotSent Classification = "event_not_sent"
	// NotConsumed: the event was sent, but the participant that should have
	// acted on it has no record of it.
	NotConsumed Classification = "not_consumed"
	// NotApplied: the event was sent and the participant processed it (its
	// inbox has the event_id), yet its record does not show the effect
	// (a dedupe record committed without its business change, a handler
	// that recorded the wrong state). Sending the same event_id again
	// would be dropped by that inbox.
	NotApplied Classification = "not_applied"
	// ResultMissing: a participant has a result (reservation reserved or
	// rejected, payment succeeded or failed, refund done) that the order
	// does not reflect: the result event was lost or not consumed.
	ResultMissing Classification = "result_missing"
	// ReallyFailed: a participant failed for good or parked the step for an
	// operator, or its record contradicts the order. Nothing automatic is
	// safe; the finding is reported.
	ReallyFailed Classification = "really_failed"
	// InProgress: a participant is still working on it (a payment pending,
	// an event being dispatched). Nothing to do.
	InProgress Classification = "in_progress"
	// Unknown: a participant could not be asked. Nothing is decided on
	// half the evidence; the next run asks again.
	Unknown Classification = "unknown"
	// Consistent: a finished order whose participants all recorded what
	// its outcome implies. The saga is closed; the order is not looked at
	// again (unless it changes).
	Consistent Classification = "consistent"
)

// Classifications lists every classification.
var Classifications = []Classification{EventNotSent, NotConsumed, NotApplied, ResultMissing, ReallyFailed, InProgress, Unknown, Consistent}

// Difference reports whether c is a difference between the services'
// records (what reconciliation_differences_total counts).
func (c Classification) Difference() bool {
	return c == EventNotSent || c == NotConsumed || c == NotApplied || c == ResultMissing || c == ReallyFailed
}

// RepairAction is the idempotent entry point a repair goes through.
type RepairAction string

const (
	// NoAction: nothing to repair (in progress, unknown).
	NoAction RepairAction = "none"
	// RepublishEvent: our event is still pending or failed in our outbox:
	// put it back to pending, due now, same event_id. The dispatcher sends
	// it; consumers that already have it drop it by their inbox.
	RepublishEvent RepairAction = "republish_event"
	// ResendEvent: our event was sent but the participant has no record of
	// it: put the same row (same event_id) back to pending so it is
	// published again. A replay of the same fact, not a correction: a
	// consumer that applied it drops the copy by its inbox, one that never
	// got it applies it once.
	ResendEvent RepairAction = "resend_event"
	// CorrectEvent: the participant processed our event (its inbox has it)
	// but its record does not show the effect, so a replay would be
	// dropped. The reconciler decides to have it applied again: a
	// correction, a new event of the same type and payload with a new
	// event_id and the order's next version, whose corrects_event_id names
	// the original (the chapter, 有限重试与死信: 需要发起新的纠正操作，应分配新事件 ID，
	// 并记录它与原事件的关系). The participant's inbox takes it as a new event,
	// and its handler applies it through the same state transition as any
	// event (a conditional update on the legal prior states), so a record
	// that moved on meanwhile takes nothing from it.
	CorrectEvent RepairAction = "correct_event"
	// ApplyResult: apply the participant's result to the order with the
	// trigger its lost event would have fired, through the same transition
	// the consumer uses (as if the event had arrived).
	ApplyResult RepairAction = "apply_result"
	// RepublishParticipantEvent: the participant's own result event is
	// failed in its outbox: ask it to retry that event by its event_id
	// (POST /admin/outbox/{event_id}/retry), so every consumer of it, not
	// only the order, gets it.
	RepublishParticipantEvent RepairAction = "republish_participant_event"
	// Report: nothing automatic is safe (a parked payment, a contradiction):
	// an audit row tells the operator.
	Report RepairAction = "report"
)

// The participants' statuses as their HTTP APIs show them
// (GET /reservations/{order_id}, GET /payments/{order_id}).
const (
	ResReserved               = "reserved"
	ResRejected               = "rejected"
	ResCommitted              = "committed"
	ResReleased               = "released"
	ResRestocked              = "restocked"
	ResCancelledBeforeReserve = "cancelled_before_reserve"
	ResExpired                = "expired"
	ResCommitFailed           = "commit_failed"

	PayPending               = "pending"
	PaySucceeded             = "succeeded"
	PayFailed                = "failed"
	PayRefunded              = "refunded"
	PayNeedsAttention        = "needs_attention"
	PayCancelledBeforeCharge = "cancelled_before_charge"
	PayWithdrawn             = "withdrawn"
	PayNone                  = "" // no record (404)

	RefundReqRequested      = "requested"
	RefundReqSucceeded      = "succeeded"
	RefundReqNeedsAttention = "needs_attention"
)

// Outbox row statuses (pkg/outbox).
const (
	OutboxPending = "pending"
	OutboxSending = "sending"
	OutboxSent    = "sent"
	OutboxFailed  = "failed"
)

// EventState is one outbox row as the reconciler sees it.
type EventState struct {
	EventID string
	Type    string
	Status  string // pending, sending, sent, failed
}

// Observation is everything the reconciler learnt about one order. A
// participant's status is "" when it has no record (404).
type Observation struct {
	Status       Status
	RefundStatus RefundStatus
	OwnEvents    []EventState // our outbox rows for the order, oldest first

	InventoryAnswered bool // false: inventory could not be asked
	Reservation       string
	ReservationReason string
	// InventoryEvents are inventory's outbox rows for the order; nil when
	// they could not be read (the admin API refused or failed).
	InventoryEvents []EventState

	PaymentAnswered bool // false: payment could not be asked
	Payment         string
	PaymentFailure  string // failure_reason of a failed payment
	Refund          string // status of the payment's refund; "" when none was requested

	// EarlierRepairs counts the repairs already made for this finished
	// order that did not close it (its audit rows with outcome repaired).
	EarlierRepairs int

	// Processed answers, for a sent event of ours the participant has no
	// record of, whether the participant's inbox has it (GET /admin/inbox),
	// keyed by event_id. It is asked only after a first Classify chose
	// resend_event (Verdict.Service names whom to ask). An event that is
	// not in the map was not asked about, or the participant could not
	// answer: the replay, which is safe either way, stands.
	Processed map[string]bool
}

// MaxRepairs bounds the automatic repairs of one finished order: a
// difference that this many repairs (each through an idempotent entry
// point, one per run) did not close is reported for an operator instead.
const MaxRepairs = 3

// Verdict is what Classify decided for one order.
type Verdict struct {
	Classification Classification
	Action         RepairAction
	Why            string // the evidence in one sentence, for the audit row and the log

	// For ApplyResult: the trigger and the status reason it records.
	Trigger Trigger
	Reason  string
	// For RepublishEvent, ResendEvent, CorrectEvent,
	// RepublishParticipantEvent: the event (by its id) and, but for the
	// first, a service: for RepublishParticipantEvent the one that owns the
	// event, for ResendEvent and CorrectEvent the participant that should
	// have applied ours.
	EventID string
	Service string
}

// Classify decides what the reconciler does about an order that is still
// open after the grace window (pending_inventory, awaiting_payment),
// cancelled with its refund still pending, or finished (confirmed,
// rejected, cancelled) within the recent window. The order of the checks
// matters: a final result anywhere is the strongest evidence, then what
// the first participant did, then whether our own event left.
func Classify(o Observation) Verdict {
	if !o.InventoryAnswered || !o.PaymentAnswered {
		return Verdict{Classification: Unknown, Action: NoAction,
			Why: "a participant could not be asked; nothing is decided on half the evidence"}
	}
	switch {
	case o.Status == PendingInventory || o.Status == AwaitingPayment:
		return classifyOpen(o)
	case o.Status == Cancelled && o.RefundStatus == RefundPending:
		return classifyRefund(o)
	}
	v := classifyFinished(o)
	if v.Action != NoAction && v.Action != Report && o.EarlierRepairs >= MaxRepairs {
		return report(fmt.Sprintf("%d repairs did not close the order; the last finding: %s", o.EarlierRepairs, v.Why))
	}
	return v
}

// classifyFinished compares a finished order with what its outcome implies
// at each participant:
//
//	confirmed: the reservation committed, the payment succeeded (one charge; no refund)
//	cancelled: the reservation released, restocked, rejected or never made
//	           (a marker, or none); the charge none, declined, withdrawn,
//	           closed uncharged, or refunded (refund_status refunded)
//	rejected:  nothing reserved (rejected), nothing charged (no payment, or a marker)
//
// A participant that missed our event gets it again (the same event_id);
// a result the order missed is applied; a contradiction no entry point can
// repair is reported.
func classifyFinished(o Observation) Verdict {
	switch o.Status {
	case Confirmed:
		return classifyConfirmed(o)
	case Cancelled:
		return classifyCancelled(o)
	case Rejected:
		return classifyRejected(o)
	}
	return report(fmt.Sprintf("order status %q is not one the reconciler knows", o.Status))
}

func classifyConfirmed(o Observation) Verdict {
	if o.Payment != PaySucceeded || o.Refund != "" {
		return report(fmt.Sprintf("the order is confirmed but payment says %q (refund %q): want one succeeded charge and no refund",
			o.Payment, o.Refund))
	}
	switch o.Reservation {
	case ResCommitted:
		return consistent("confirmed: reservation committed, charge succeeded")
	case ResReserved, ResExpired:
		// The stock is still held (or its lease ran out): inventory never
		// applied order.confirmed. Sent again, it commits the sale (or,
		// after the expiry, takes the stock again or reports
		// commit-failed).
		return ownEvent(o, "order.confirmed", "inventory", "inventory says "+o.Reservation)
	case ResCommitFailed:
		return resultEvent(o, "inventory.commit-failed", "", Verdict{Classification: ResultMissing, Action: ApplyResult,
			Trigger: InventoryCommitFailed, Reason: "stock gone after the reservation expired: " + o.ReservationReason,
			Why: "inventory could not commit the sale (commit_failed), the order is still confirmed"})
	}
	return report(fmt.Sprintf("the order is confirmed but inventory says %q", o.Reservation))
}

func classifyCancelled(o Observation) Verdict {
	refunded := o.RefundStatus == RefundRefunded
	// The money first: a charge kept for a cancelled order is the worst
	// difference.
	switch {
	case o.Payment == PaySucceeded && !refunded:
		// The order missed payment.succeeded: recorded, it owes the
		// refund (refund pending), and the refund's own check follows.
		return Verdict{Classification: ResultMissing, Action: ApplyResult, Trigger: PaymentSucceeded,
			Why: "payment says succeeded for a cancelled order whose refund is not pending: the money is owed back"}
	case o.Payment == PayRefunded && !refunded:
		return Verdict{Classification: ResultMissing, Action: ApplyResult, Trigger: PaymentRefunded,
			Why: "payment says refunded, the cancelled order's refund_status does not"}
	case refunded && o.Payment != PayRefunded:
		return report(fmt.Sprintf("the order says refunded but payment says %q", o.Payment))
	case o.Payment == PayNeedsAttention:
		return report("the cancelled order's charge is parked as needs_attention at the payment service")
	}
	paymentClosed := o.Payment != PayPending
	switch o.Reservation {
	case ResReleased, ResRestocked, ResCancelledBeforeReserve, ResRejected, ResCommitFailed:
		if !paymentClosed {
			return Verdict{Classification: InProgress, Action: NoAction,
				Why: "payment is settling the cancelled order's charge (a status query by its key)"}
		}
		return consistent(fmt.Sprintf("cancelled: reservation %s, payment %s", o.Reservation, orNone(o.Payment)))
	case ResReserved, ResCommitted, ResExpired, "":
		// Inventory never applied order.cancelled: stock still held or
		// sold, or no record at all (not even the marker a cancel leaves).
		return ownEvent(o, "order.cancelled", "inventory", fmt.Sprintf("inventory says %q for a cancelled order", o.Reservation))
	}
	return report(fmt.Sprintf("the order is cancelled but inventory says %q", o.Reservation))
}

func classifyRejected(o Observation) Verdict {
	if o.Reservation != ResRejected {
		return report(fmt.Sprintf("the order is rejected but inventory says %q: want nothing reserved", o.Reservation))
	}
	if o.Payment != PayNone && o.Payment != PayCancelledBeforeCharge {
		return report(fmt.Sprintf("the order is rejected but payment says %q: want nothing charged", o.Payment))
	}
	return consistent("rejected: nothing reserved, nothing charged")
}

// resultEvent looks at inventory's own result event of type typ: failed in
// inventory's outbox means it never left, and a retry there reaches every
// consumer; pending or sending means inventory's dispatcher is on it.
// Otherwise (sent, or not readable) the fallback verdict stands. note is
// added to the explanation.
func resultEvent(o Observation, typ, note string, fallback Verdict) Verdict {
	for _, e := range o.InventoryEvents {
		if e.Type != typ {
			continue
		}
		switch e.Status {
		case OutboxFailed:
			return Verdict{Classification: EventNotSent, Action: RepublishParticipantEvent, EventID: e.EventID, Service: "inventory",
				Why: typ + " is failed in inventory's outbox" + note + ": retry it there, same event_id"}
		case OutboxPending, OutboxSending:
			return Verdict{Classification: InProgress, Action: NoAction,
				Why: typ + " is still " + e.Status + " in inventory's outbox" + note + ": its dispatcher sends it"}
		}
	}
	return fallback
}

func consistent(why string) Verdict {
	return Verdict{Classification: Consistent, Action: NoAction, Why: why}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func classifyOpen(o Observation) Verdict {
	// 1. The payment has a final result: the order missed it.
	switch o.Payment {
	case PaySucceeded:
		return Verdict{Classification: ResultMissing, Action: ApplyResult, Trigger: PaymentSucceeded,
			Why: fmt.Sprintf("payment says succeeded, the order is still %s", o.Status)}
	case PayFailed:
		return Verdict{Classification: ResultMissing, Action: ApplyResult, Trigger: PaymentFailed,
			Reason: "payment failed: " + o.PaymentFailure,
			Why:    fmt.Sprintf("payment says failed (%s), the order is still %s", o.PaymentFailure, o.Status)}
	case PayNeedsAttention:
		return report("payment parked the charge as needs_attention (outcome unknown at its deadline); " +
			"an operator resolves it at the payment service, never by charging again")
	case PayCancelledBeforeCharge, PayRefunded, PayWithdrawn:
		return report(fmt.Sprintf("payment says %s although the order is still %s", o.Payment, o.Status))
	}

	if o.Status == PendingInventory {
		return classifyPendingInventory(o)
	}
	// awaiting_payment
	if o.Payment == PayPending {
		return Verdict{Classification: InProgress, Action: NoAction,
			Why: "payment is pending: the payment service's sweep resolves it with the PSP"}
	}
	// No payment record: payment never consumed InventoryReserved.
	switch o.Reservation {
	case ResReserved, ResExpired:
		return participantEvent(o, "payment has no record of the reservation",
			Verdict{Classification: NotConsumed, Action: Report,
				Why: "inventory.reserved was sent but payment has no record of it; look for it in payment's " +
					"dead letters and redrive it (the order's payment deadline cancels it otherwise)"})
	}
	return report(fmt.Sprintf("the order is awaiting_payment but inventory says %q and payment has no record", o.Reservation))
}

func classifyPendingInventory(o Observation) Verdict {
	switch o.Reservation {
	case ResRejected:
		return Verdict{Classification: ResultMissing, Action: ApplyResult, Trigger: InventoryRejected,
			Reason: o.ReservationReason,
			Why:    "inventory rejected the reservation (" + o.ReservationReason + "), the order is still pending_inventory"}
	case ResReserved, ResExpired:
		if o.Payment != "" {
			// Payment consumed inventory.reserved; the order did not.
			return Verdict{Classification: ResultMissing, Action: ApplyResult, Trigger: InventoryReserved,
				Why: fmt.Sprintf("inventory says %s and payment is %s, the order is still pending_inventory", o.Reservation, o.Payment)}
		}
		return participantEvent(o, "neither the order nor payment has seen it",
			Verdict{Classification: ResultMissing, Action: ApplyResult, Trigger: InventoryReserved,
				Why: fmt.Sprintf("inventory says %s, the order is still pending_inventory", o.Reservation)})
	case "":
		return ownEvent(o, "order.created", "inventory", "inventory has no reservation")
	}
	return report(fmt.Sprintf("inventory says %q although the order is still pending_inventory", o.Reservation))
}

// participantEvent looks at inventory's inventory.reserved (who: why it
// matters) through resultEvent.
func participantEvent(o Observation, who string, fallback Verdict) Verdict {
	return resultEvent(o, "inventory.reserved", " ("+who+")", fallback)
}

// ownEvent classifies by our latest event of type typ: not sent yet, sent
// and not consumed (missing says what shows that participant has no
// record), or, once the participant's inbox was asked (o.Processed),
// processed there without its effect.
func ownEvent(o Observation, typ, participant, missing string) Verdict {
	var ev *EventState
	for i := range o.OwnEvents {
		if o.OwnEvents[i].Type == typ {
			ev = &o.OwnEvents[i]
		}
	}
	if ev == nil {
		return report(fmt.Sprintf("%s and our outbox has no %s for the order", missing, typ))
	}
	switch ev.Status {
	case OutboxPending, OutboxFailed:
		return Verdict{Classification: EventNotSent, Action: RepublishEvent, EventID: ev.EventID,
			Why: fmt.Sprintf("%s: our %s is still %s in the outbox", missing, typ, ev.Status)}
	case OutboxSending:
		return Verdict{Classification: InProgress, Action: NoAction,
			Why: fmt.Sprintf("%s: our %s is being sent (a dispatcher holds its lease)", missing, typ)}
	}
	if o.Processed[ev.EventID] {
		return Verdict{Classification: NotApplied, Action: CorrectEvent, EventID: ev.EventID, Service: participant,
			Why: fmt.Sprintf("%s although our %s was sent and %s's inbox has it: the same event_id would be dropped; "+
				"a correction with a new event_id", missing, typ, participant)}
	}
	return Verdict{Classification: NotConsumed, Action: ResendEvent, EventID: ev.EventID, Service: participant,
		Why: fmt.Sprintf("%s although our %s was sent: send the same event_id again", missing, typ)}
}

func classifyRefund(o Observation) Verdict {
	if o.Payment == PayRefunded || o.Refund == RefundReqSucceeded {
		return Verdict{Classification: ResultMissing, Action: ApplyResult, Trigger: PaymentRefunded,
			Why: "payment says the refund succeeded, the order's refund is still pending"}
	}
	switch o.Refund {
	case RefundReqRequested:
		return Verdict{Classification: InProgress, Action: NoAction,
			Why: "the refund is requested at the payment service: its sweep retries it until its deadline"}
	case RefundReqNeedsAttention:
		return report("the refund kept failing and is parked as needs_attention at the payment service: the customer's money is still owed")
	}
	switch o.Payment {
	case PaySucceeded:
		return ownEvent(o, "order.cancelled", "payment", "payment has a succeeded charge and no refund")
	case PayPending:
		return Verdict{Classification: InProgress, Action: NoAction,
			Why: "the charge is still pending at the payment service; the refund follows its outcome"}
	case PayNeedsAttention:
		return report("the charge is parked as needs_attention at the payment service; the refund waits for an operator")
	}
	return report(fmt.Sprintf("the order's refund is pending but payment says %q and has no refund", o.Payment))
}

func report(why string) Verdict {
	return Verdict{Classification: ReallyFailed, Action: Report, Why: why}
}
