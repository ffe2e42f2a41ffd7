package order

import "fmt"

// What payment says of an order's charge when the order's payment deadline
// passes (GET /payments/{order_id}/outcome). Payment answers from its
// record when it is decided, and otherwise asks the PSP by the charge's
// idempotency key first (扣款超时结果未知时，先查询，而不是直接取消).
const (
	OutcomeSucceeded  = "succeeded"   // charged: payment.succeeded is on its way (or was lost: the reconciler applies it)
	OutcomeDeclined   = "declined"    // the PSP declined: nothing charged
	OutcomeRefunded   = "refunded"    // charged and paid back
	OutcomeNotCharged = "not_charged" // never sent to the PSP, or closed without a charge
	OutcomeUnknown    = "unknown"     // sent, and the PSP has no answer yet, or could not be asked
	OutcomeNoPayment  = "no_payment"  // payment has no record of the order (404)
	OutcomeNotAsked   = "not_asked"   // payment could not be asked
)

// Outcomes lists every answer AtPaymentDeadline decides on.
var Outcomes = []string{OutcomeSucceeded, OutcomeDeclined, OutcomeRefunded, OutcomeNotCharged, OutcomeUnknown,
	OutcomeNoPayment, OutcomeNotAsked}

// DeadlineAction is what the deadline sweep does with an order waiting for
// its payment.
type DeadlineAction string

const (
	// DeadlineCancel: cancel now (order.cancelled; payment refunds what it
	// may have charged, and charges nothing more).
	DeadlineCancel DeadlineAction = "cancel"
	// DeadlineWait: leave the order waiting and ask again later.
	DeadlineWait DeadlineAction = "wait"
)

// DeadlineDecision is what AtPaymentDeadline decided, and why.
type DeadlineDecision struct {
	Action DeadlineAction
	Reason string // the order's status_reason when it is cancelled
	Why    string // for the log
}

// AtPaymentDeadline decides what becomes of an order in awaiting_payment
// whose deadline passed, from payment's answer (outcome) and whether the
// bounded wait for an unknown outcome is over (giveUp):
//
//   - succeeded: never cancel a paid order at its deadline: the confirm is
//     on its way, or the reconciler applies it if the event was lost. Wait,
//     without a bound;
//   - declined, not charged, refunded, no payment: nothing is or can be
//     charged for it any more (a charge not sent yet is withdrawn by the
//     cancel): cancel;
//   - unknown, or payment could not be asked: wait, asking again, until
//     giveUp; then cancel. The cancel is safe even then: payment remembers
//     it, and a charge that lands later is refunded (the chapter's late
//     payment), never kept.
func AtPaymentDeadline(outcome string, giveUp bool) DeadlineDecision {
	switch outcome {
	case OutcomeSucceeded:
		return DeadlineDecision{Action: DeadlineWait,
			Why: "payment says the charge succeeded: waiting for payment.succeeded (the reconciler applies it if it was lost)"}
	case OutcomeDeclined, OutcomeNotCharged, OutcomeRefunded, OutcomeNoPayment:
		return DeadlineDecision{Action: DeadlineCancel, Reason: DeadlineReason(AwaitingPayment),
			Why: fmt.Sprintf("payment says %s: nothing will be charged, cancelling", outcome)}
	}
	// Unknown, not asked, or an answer this version does not know.
	what := "payment says the outcome is unknown"
	if outcome == OutcomeNotAsked {
		what = "payment could not be asked"
	}
	if !giveUp {
		return DeadlineDecision{Action: DeadlineWait, Why: what + ": asking again later"}
	}
	return DeadlineDecision{Action: DeadlineCancel,
		Reason: "payment deadline passed with the charge's outcome unknown (a late charge is refunded)",
		Why:    what + " and the wait for it is over: cancelling; a charge that lands later is refunded"}
}
