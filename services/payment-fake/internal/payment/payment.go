// Package payment is the payment domain: the statuses of an order's charge
// and of its refund, the transition tables that move them, and the rules a
// new payment must meet. It is pure Go: no SQL, no AMQP, no HTTP, and it
// does not know the PSP's wire types either (paymentapp translates a PSP
// answer into a Trigger).
//
// The saga's four questions, as this package answers them:
//
//  1. Idempotency keys: the charge is "charge-<order_id>" (ChargeKey), the
//     refund "refund-<order_id>" (RefundKey); every attempt, re-request and
//     status query of a step carries its key, so the PSP charges and refunds
//     at most once per order.
//  2. Unknown charge outcome: "no answer" is not a trigger. A payment stays
//     pending until a status query with the same key finds the charge; one
//     still unknown at its deadline is parked as NeedsAttention, never read
//     as failed or succeeded.
//  3. Late success: a charge that succeeds after the order was cancelled
//     owes a refund at once (RefundDue).
//  4. Compensation failure: a refund is retried until its deadline, then
//     parked as RefundNeedsAttention for an operator.
package payment

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Status is where an order's payment stands.
type Status string

const (
	// NoPayment is the start: no row exists yet. It is never stored.
	NoPayment Status = ""
	// Pending: charge requested; the PSP's outcome is not recorded yet.
	Pending Status = "pending"
	// Succeeded: the PSP charged the amount. Not terminal: a cancel of the
	// order refunds it.
	Succeeded Status = "succeeded"
	// Failed: the PSP declined; nothing was charged. Terminal.
	Failed Status = "failed"
	// Refunded: the charge was paid back in full. Terminal.
	Refunded Status = "refunded"
	// NeedsAttention: the charge's outcome was still unknown at the
	// payment's deadline (the PSP could not be asked, or had no charge and
	// the order was not cancelled). Parked for an operator: not failed, not
	// succeeded, and no automatic retry calls the PSP for it. A known
	// outcome found later is still recorded.
	NeedsAttention Status = "needs_attention"
	// CancelledBeforeCharge: the order was cancelled before anything was
	// charged. Either the cancel overtook inventory.reserved (the row is a
	// marker without an amount, so a late inventory.reserved charges
	// nothing: the saga's "hanging" protection), or it arrived while the
	// charge was in flight and the PSP still had no charge with the key
	// once the in-flight window (or the deadline) had passed. A charge sent
	// before the cancel could still land: its outcome is still recorded,
	// and refunded.
	CancelledBeforeCharge Status = "cancelled_before_charge"
	// Withdrawn: the order was cancelled before the charge was ever sent to
	// the PSP, so the payment closed at once: nothing charged, and nothing
	// will be (the charge consumer sends a charge only under a
	// compare-and-set that a cancelled payment fails). Terminal.
	Withdrawn Status = "withdrawn"
)

// Statuses lists every stored status, in saga order.
var Statuses = []Status{Pending, Succeeded, Failed, Refunded, NeedsAttention, CancelledBeforeCharge, Withdrawn}

// Valid reports whether s is a known stored status.
func (s Status) Valid() bool { return slices.Contains(Statuses, s) }

// Terminal reports whether the payment is decided for good: no trigger
// moves it anywhere else.
func (s Status) Terminal() bool { return s == Failed || s == Refunded || s == Withdrawn }

// Trigger is something that happened to a payment: an event from the saga,
// an outcome learnt from the PSP, a deadline, an operator.
type Trigger string

const (
	// Reserve: inventory.reserved (stock is held, charge the order).
	Reserve Trigger = "reserve"
	// ChargeSucceeded: the PSP's charge record says succeeded.
	ChargeSucceeded Trigger = "charge_succeeded"
	// ChargeDeclined: the PSP's charge record says declined.
	ChargeDeclined Trigger = "charge_declined"
	// Cancel: order.cancelled. With no payment it leaves the marker; on a
	// pending payment whose charge may be at the PSP, or a parked one, it is
	// remembered (CancelRequested) until the outcome is known; on a
	// succeeded one it requests the refund.
	Cancel Trigger = "cancel"
	// Withdraw: order.cancelled on a pending or parked payment whose charge
	// was never sent to the PSP (see Payment.CancelTrigger).
	Withdraw Trigger = "withdraw"
	// Park: the deadline passed with the outcome still unknown.
	Park Trigger = "park"
	// Void: the deadline passed, the order was cancelled and the PSP has no
	// charge with the key: nothing was charged and nothing will be.
	Void Trigger = "void"
	// Retry: an operator put a parked payment back for another round.
	Retry Trigger = "retry"
	// RefundCompleted: the PSP refunded the charge in full.
	RefundCompleted Trigger = "refund_completed"
)

// Triggers lists every trigger.
var Triggers = []Trigger{Reserve, ChargeSucceeded, ChargeDeclined, Cancel, Withdraw, Park, Void, Retry, RefundCompleted}

// transitions is the payment's state machine: for each status, the
// triggers it accepts and where they lead. Anything not listed is not a
// legal move (a duplicate, stale or out-of-order event): the caller records
// it and changes nothing. Terminal statuses accept nothing.
//
// "No answer" from the PSP (a timeout, a dropped connection, a 5xx) is
// deliberately not a trigger: it decides nothing. A known outcome is the
// truth wherever it arrives, so it is accepted from a parked payment and
// from a payment voided after its cancel too (the second can happen only if
// a charge sent before the cancel landed after the deadline; the cancel
// then turns the success into a refund).
var transitions = map[Status]map[Trigger]Status{
	NoPayment: {
		Reserve: Pending,
		Cancel:  CancelledBeforeCharge,
	},
	Pending: {
		ChargeSucceeded: Succeeded,
		ChargeDeclined:  Failed,
		Cancel:          Pending, // remembered; decided when the outcome is known
		Withdraw:        Withdrawn,
		Park:            NeedsAttention,
		Void:            CancelledBeforeCharge,
	},
	NeedsAttention: {
		ChargeSucceeded: Succeeded,
		ChargeDeclined:  Failed,
		Cancel:          NeedsAttention, // remembered
		Withdraw:        Withdrawn,
		Retry:           Pending,
	},
	Succeeded: {
		Cancel:          Succeeded, // the refund is requested
		RefundCompleted: Refunded,
	},
	CancelledBeforeCharge: {
		ChargeSucceeded: Succeeded, // refunded at once: the order is cancelled
		ChargeDeclined:  Failed,
	},
}

// Next returns where trigger t moves a payment in status s, and whether
// the move is legal. An illegal move means the event is a duplicate or
// stale: the caller changes nothing.
func Next(s Status, t Trigger) (Status, bool) {
	to, ok := transitions[s][t]
	return to, ok
}

// Payment is one order's charge as the payment service records it.
type Payment struct {
	OrderID        uint64
	CustomerID     string // opaque id, passed to the PSP; empty in a cancel marker
	AmountCents    int64  // 0 in a cancel marker
	Currency       string
	Status         Status
	IdempotencyKey string // sent with every charge attempt and status query
	PSPChargeID    string // the PSP's charge id; empty until charged
	FailureReason  string // the PSP's decline code when failed
	Version        uint64 // aggregate_version of the last event emitted

	// ChargeSent: the charge was sent to the PSP at least once
	// (charge_sent_at), so its outcome may be there. A payment never sent
	// can be withdrawn at once.
	ChargeSent bool

	// CancelRequested: the order was cancelled (order.cancelled arrived).
	// A succeeded payment with it set owes a refund.
	CancelRequested bool
	CancelReason    string // the cancel's reason, and late events recorded as stale

	// The deadline of the charge's outcome and the evidence gathered while
	// it was unknown.
	DeadlineAt   time.Time // zero for a cancel marker
	Attempts     int       // charge attempts and status queries that did not settle the outcome
	LastError    string    // the last of them
	ParkedReason string    // why it was parked as needs_attention

	// RequestEventID is the event_id of the latest payment.charge-requested
	// ("" for a marker, and for rows from before it was kept): what a new
	// request corrects.
	RequestEventID string

	CreatedAt time.Time
	UpdatedAt time.Time
}

// RefundDue reports whether the payment owes the customer a refund that is
// not requested yet: it was charged and its order was cancelled. It holds
// after a cancel of a succeeded payment, and after a charge outcome
// recorded for a payment whose order was cancelled meanwhile.
func (p Payment) RefundDue() bool { return p.Status == Succeeded && p.CancelRequested }

// CancelTrigger is what order.cancelled does to p. A pending (or parked)
// payment whose charge was never sent to the PSP is withdrawn at once:
// nothing can have been charged, and the charge consumer's compare-and-set
// before sending fails from now on. Everything else is a Cancel:
// remembered until the outcome is known (pending or parked, in flight), a
// refund (succeeded), or nothing (decided).
func (p Payment) CancelTrigger() Trigger {
	if (p.Status == Pending || p.Status == NeedsAttention) && !p.ChargeSent && !p.CancelRequested {
		return Withdraw
	}
	return Cancel
}

// AtDeadline is where a payment still pending at its deadline goes.
// pspHasNoCharge means the status query answered "no charge with this
// key" (as opposed to failing). A cancelled order that was never charged
// is voided: nothing was charged and nothing will be. Everything else is
// parked: the outcome is unknown, or the order still waits for a charge
// the PSP never received, and a person decides.
func AtDeadline(p Payment, pspHasNoCharge bool) Trigger {
	if pspHasNoCharge && p.CancelRequested {
		return Void
	}
	return Park
}

var (
	// ErrInvalid wraps every reason a payment cannot be created from the
	// facts given (the event carrying them can never be processed).
	ErrInvalid = errors.New("invalid payment")
	// ErrNotFound: no payment for this order.
	ErrNotFound = errors.New("payment not found")
	// ErrNotParked: the payment or refund is not waiting for an operator.
	ErrNotParked = errors.New("nothing parked for this order")
)

// ChargeKey is the idempotency key of an order's charge at the PSP: one per
// order, derived from the order id, so every attempt for the order (a
// redelivery, a retry after an unknown outcome, a re-request by the sweep,
// a redriven dead letter) carries the same key and the PSP charges at most
// once.
func ChargeKey(orderID uint64) string { return "charge-" + strconv.FormatUint(orderID, 10) }

// RefundKey is the idempotency key of an order's refund: one refund of the
// full amount per order, so the PSP refunds at most once whatever retries.
func RefundKey(orderID uint64) string { return "refund-" + strconv.FormatUint(orderID, 10) }

// New returns the pending payment of an order, first event version 1 (the
// charge request), or an error wrapping ErrInvalid.
func New(orderID uint64, customerID string, amountCents int64, currency string) (Payment, error) {
	p := Payment{OrderID: orderID, CustomerID: customerID, AmountCents: amountCents, Currency: currency,
		Status: Pending, IdempotencyKey: ChargeKey(orderID), Version: 1}
	return p, p.validate()
}

// Marker returns the row a cancel leaves for an order that has no payment
// yet: status CancelledBeforeCharge, no amount, no event emitted (version
// 0). Its primary key is what a late inventory.reserved collides with.
func Marker(orderID uint64, reason string) Payment {
	return Payment{OrderID: orderID, Status: CancelledBeforeCharge, IdempotencyKey: ChargeKey(orderID),
		CancelRequested: true, CancelReason: Clip(reason, 255)}
}

// IsMarker reports whether p is a cancel marker rather than a payment that
// was ever to be charged.
func (p Payment) IsMarker() bool { return p.Status == CancelledBeforeCharge && p.AmountCents == 0 }

func (p Payment) validate() error {
	switch {
	case p.OrderID == 0:
		return fmt.Errorf("%w: order id missing", ErrInvalid)
	case p.CustomerID == "" || strings.TrimSpace(p.CustomerID) != p.CustomerID ||
		!utf8.ValidString(p.CustomerID) || utf8.RuneCountInString(p.CustomerID) > 64:
		return fmt.Errorf("%w: customer id must be 1-64 characters without surrounding spaces", ErrInvalid)
	case p.AmountCents <= 0:
		return fmt.Errorf("%w: amount must be a positive number of cents, not %d", ErrInvalid, p.AmountCents)
	case len(p.Currency) != 3 || strings.Trim(p.Currency, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "":
		return fmt.Errorf("%w: currency must be a three-letter ISO 4217 code, not %q", ErrInvalid, p.Currency)
	}
	return nil
}

// Clip shortens s to at most n bytes without splitting a UTF-8 character,
// so notes and evidence fit their columns.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
