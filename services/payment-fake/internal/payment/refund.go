package payment

import "time"

// RefundStatus is where an order's refund stands. There is at most one
// refund per order, of the full amount, keyed RefundKey(order id).
type RefundStatus string

const (
	// NoRefund is the start: no row exists yet. It is never stored.
	NoRefund RefundStatus = ""
	// RefundRequested: the refund is to be made; the PSP has not confirmed
	// it yet. Retried with backoff until the refund's deadline.
	RefundRequested RefundStatus = "requested"
	// RefundSucceeded: the PSP refunded the charge. Terminal.
	RefundSucceeded RefundStatus = "succeeded"
	// RefundNeedsAttention: the refund kept failing until its deadline (or
	// the PSP refused it): the compensation is parked for an operator, with
	// the evidence. The customer's money is still owed.
	RefundNeedsAttention RefundStatus = "needs_attention"
)

// RefundStatuses lists every stored refund status.
var RefundStatuses = []RefundStatus{RefundRequested, RefundSucceeded, RefundNeedsAttention}

// Terminal reports whether the refund is done for good.
func (s RefundStatus) Terminal() bool { return s == RefundSucceeded }

// RefundTrigger is something that happened to a refund.
type RefundTrigger string

const (
	RequestRefund RefundTrigger = "request" // a cancelled order's charge is to be paid back
	RefundDone    RefundTrigger = "done"    // the PSP's refund record exists
	RefundPark    RefundTrigger = "park"    // deadline passed, or the PSP refused the refund
	RefundRetry   RefundTrigger = "retry"   // an operator put it back for another round
)

// RefundTriggers lists every refund trigger.
var RefundTriggers = []RefundTrigger{RequestRefund, RefundDone, RefundPark, RefundRetry}

// refundTransitions is the refund's state machine. A refund found at the
// PSP is the truth wherever it arrives, parked refunds included.
var refundTransitions = map[RefundStatus]map[RefundTrigger]RefundStatus{
	NoRefund:             {RequestRefund: RefundRequested},
	RefundRequested:      {RefundDone: RefundSucceeded, RefundPark: RefundNeedsAttention},
	RefundNeedsAttention: {RefundDone: RefundSucceeded, RefundRetry: RefundRequested},
}

// NextRefund returns where trigger t moves a refund in status s, and
// whether the move is legal.
func NextRefund(s RefundStatus, t RefundTrigger) (RefundStatus, bool) {
	to, ok := refundTransitions[s][t]
	return to, ok
}

// Refund is an order's refund: the compensation of a charge whose order
// was cancelled.
type Refund struct {
	OrderID        uint64
	IdempotencyKey string // RefundKey(order id), on every attempt and status query
	PSPChargeID    string // the charge refunded
	AmountCents    int64  // the full amount charged
	Status         RefundStatus
	PSPRefundID    string // the PSP's refund id, once refunded
	Reason         string // why it was requested (the order's cancel reason)

	DeadlineAt   time.Time // when retrying stops and the refund is parked
	Attempts     int       // refund calls and status queries that did not settle it
	LastError    string    // the last of them
	ParkedReason string

	// RequestEventID is the event_id of the latest payment.refund-requested
	// ("" for rows from before it was kept): what a new request corrects.
	RequestEventID string

	CreatedAt time.Time
	UpdatedAt time.Time
}

// NewRefund is the refund a payment owes (see Payment.RefundDue).
func NewRefund(p Payment, reason string) Refund {
	return Refund{OrderID: p.OrderID, IdempotencyKey: RefundKey(p.OrderID), PSPChargeID: p.PSPChargeID,
		AmountCents: p.AmountCents, Status: RefundRequested, Reason: Clip(reason, 255)}
}
