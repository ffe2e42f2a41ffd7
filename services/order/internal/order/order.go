// Package order is the order domain: statuses, the transition table of the
// saga as seen by the order service, and the rules a new order must meet.
// It is pure Go: no SQL, no AMQP, no HTTP.
package order

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"
)

// Status is where an order stands.
type Status string

const (
	PendingInventory Status = "pending_inventory" // accepted; waiting for inventory
	AwaitingPayment  Status = "awaiting_payment"  // stock reserved; waiting for payment
	Confirmed        Status = "confirmed"         // paid; stock committed
	Rejected         Status = "rejected"          // inventory said no; nothing to compensate
	Cancelled        Status = "cancelled"         // payment failed or cancelled; compensated
)

// Statuses lists every status, in saga order.
var Statuses = []Status{PendingInventory, AwaitingPayment, Confirmed, Rejected, Cancelled}

// Valid reports whether s is a known status.
func (s Status) Valid() bool { return slices.Contains(Statuses, s) }

// Terminal reports whether the saga is over for this order. Rejected and
// cancelled accept no transition; confirmed accepts only a cancel (a new
// business transaction: refund and restock, not a way back) or the news
// that its stock could not be committed (cancel and refund).
func (s Status) Terminal() bool { return s == Confirmed || s == Rejected || s == Cancelled }

// RefundStatus tracks money paid back after a charge (issue: cancellation).
type RefundStatus string

const (
	RefundNone     RefundStatus = "none"
	RefundPending  RefundStatus = "pending"
	RefundRefunded RefundStatus = "refunded"
)

// Trigger is something that happened to an order.
type Trigger string

const (
	InventoryReserved Trigger = "inventory_reserved"
	InventoryRejected Trigger = "inventory_rejected"
	PaymentSucceeded  Trigger = "payment_succeeded"
	PaymentFailed     Trigger = "payment_failed"
	// CancelRequested: the customer (or a deadline) cancels. After
	// confirmed this is a new business transaction (refund and restock),
	// not an undo.
	CancelRequested Trigger = "cancel_requested"
	PaymentRefunded Trigger = "payment_refunded"
	// InventoryCommitFailed: the order was paid after its reservation
	// expired, and the stock was gone: cancel and refund.
	InventoryCommitFailed Trigger = "inventory_commit_failed"
)

// Triggers lists every trigger.
var Triggers = []Trigger{InventoryReserved, InventoryRejected, PaymentSucceeded, PaymentFailed, CancelRequested,
	PaymentRefunded, InventoryCommitFailed}

// transitions is the saga from the order's point of view: for each status,
// the triggers it accepts and where they lead. Anything not listed is not a
// legal move; terminal statuses accept nothing.
//
// Events of different services can overtake each other on the way to the
// order's queue (several consumers, retries, redeliveries): a payment
// result may arrive before the InventoryReserved that caused it. A payment
// result implies the reservation happened, so pending_inventory accepts it
// too, and the late InventoryReserved then finds a later state and changes
// nothing. This is how the order service tolerates reordering instead of
// relying on delivery order.
var transitions = map[Status]map[Trigger]Status{
	PendingInventory: {
		InventoryReserved: AwaitingPayment,
		InventoryRejected: Rejected,
		PaymentSucceeded:  Confirmed,
		PaymentFailed:     Cancelled,
		CancelRequested:   Cancelled,
	},
	AwaitingPayment: {
		PaymentSucceeded: Confirmed,
		PaymentFailed:    Cancelled,
		CancelRequested:  Cancelled,
	},
	Confirmed: {
		CancelRequested:       Cancelled,
		InventoryCommitFailed: Cancelled,
	},
}

// Next returns where trigger t moves an order in status s, and whether the
// move is legal. An illegal move is a stale or out-of-order event: the
// caller records it and changes nothing. Rejected and cancelled accept
// nothing; confirmed accepts only a cancel (refund and restock).
func Next(s Status, t Trigger) (Status, bool) {
	to, ok := transitions[s][t]
	return to, ok
}

// Refund says how a trigger changes the refund status of an order, given
// its status before the trigger. Money paid for an order that ends
// cancelled must come back: a cancel after confirm, or a payment that
// succeeds after the order was cancelled (the late payment of the chapter),
// sets the refund to pending; the payment service refunds, and its
// PaymentRefunded closes it.
func Refund(from Status, current RefundStatus, t Trigger) RefundStatus {
	switch {
	case (t == CancelRequested || t == InventoryCommitFailed) && from == Confirmed:
		return RefundPending
	case t == PaymentSucceeded && from == Cancelled && current == RefundNone:
		return RefundPending
	case t == PaymentRefunded && from == Cancelled:
		return RefundRefunded
	}
	return current
}

// Order is an order as the domain sees it.
type Order struct {
	ID           uint64
	CustomerID   string
	Status       Status
	StatusReason string
	RefundStatus RefundStatus
	Items        []Item
	TotalCents   int64
	Currency     string
	Version      uint64 // aggregate_version of the last event
	CreatedAt    time.Time
	UpdatedAt    time.Time
	// DeadlineAt is when the order's current waiting state runs out (zero:
	// no deadline, the saga is over). See Deadlines.
	DeadlineAt time.Time
}

// Deadlines are the business time limits of the waiting states: how long
// an order may wait in pending_inventory for inventory's answer, and in
// awaiting_payment for the payment's outcome. Each is set, in database
// time, by the same UPDATE that moves the order into the state, and cleared
// by the move out of it; a sweep acts on orders whose deadline passed (see
// deadline.go): pending_inventory is cancelled through the customer
// cancel's path (CancelRequested); awaiting_payment is cancelled only after
// payment was asked what became of the charge.
//
// The two services' payment deadlines are ordered, not equal: the payment
// service parks (or closes) an unknown charge at its own PAYMENT_DEADLINE,
// and the order asks payment only PaymentMargin later, so the order's
// question finds the payment's own decision made, and the two never race
// to decide one charge. PAYMENT_DEADLINE is one variable read by both
// services; the order adds the margin.
//
// The order gives up before inventory's reservation lease
// (RESERVATION_TTL, 15m by default) runs out: Payment + PaymentMargin +
// OutcomeWait stays below it (checked at start). An order that outlives
// its reservation still ends consistent (inventory takes the stock again
// on confirm or reports commit-failed, see the inventory package), but
// that is the expensive path; the deadlines keep it rare.
type Deadlines struct {
	Participant time.Duration // pending_inventory: inventory did not answer (PARTICIPANT_DEADLINE)
	// Payment is the payment service's deadline for an unknown charge
	// outcome (PAYMENT_DEADLINE, the same variable the payment service
	// reads).
	Payment time.Duration
	// PaymentMargin: the order asks payment this long after Payment
	// (PAYMENT_DEADLINE_MARGIN); at least the payment sweep's interval.
	PaymentMargin time.Duration
	// OutcomeWait bounds how much longer the order waits, asking again
	// every Recheck, while payment says the outcome is unknown
	// (PAYMENT_OUTCOME_WAIT, PAYMENT_OUTCOME_RECHECK).
	OutcomeWait time.Duration
	Recheck     time.Duration
}

// DefaultDeadlines: inventory answers in milliseconds when it is up, so two
// minutes mean it is down or the event is lost; ten minutes for the payment
// leaves room for a slow PSP and its status queries; the order asks a
// minute after that, waits at most two more minutes for an unknown outcome,
// and so gives up after 13 minutes, below the 15-minute reservation lease.
var DefaultDeadlines = Deadlines{Participant: 2 * time.Minute, Payment: 10 * time.Minute,
	PaymentMargin: time.Minute, OutcomeWait: 2 * time.Minute, Recheck: 15 * time.Second}

// For returns how long an order may stay in status s before the sweep
// looks at it (0: no deadline).
func (d Deadlines) For(s Status) time.Duration {
	switch s {
	case PendingInventory:
		return d.Participant
	case AwaitingPayment:
		return d.Payment + d.PaymentMargin
	}
	return 0
}

// GiveUp is how long after entering awaiting_payment the order stops
// waiting for an unknown payment outcome.
func (d Deadlines) GiveUp() time.Duration { return d.For(AwaitingPayment) + d.OutcomeWait }

// DeadlineReason is the cancel reason of an order whose deadline passed in
// status s.
func DeadlineReason(s Status) string {
	switch s {
	case PendingInventory:
		return "inventory did not answer in time"
	case AwaitingPayment:
		return "payment deadline passed"
	}
	return "deadline passed"
}

// Item is one priced order line.
type Item struct {
	SKU            string
	Quantity       int
	UnitPriceCents int64
}

// Line is one requested line, before pricing.
type Line struct {
	SKU      string
	Quantity int
}

// Request is a new order as the client asked for it.
type Request struct {
	CustomerID string
	Lines      []Line
}

// Limits on a request: generous for real use, tight enough that a typo or
// an attack cannot create an absurd order.
const (
	MaxLines    = 50
	MaxQuantity = 1000
)

var (
	idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)
	// ErrInvalid wraps every reason a request is refused before it is
	// written (HTTP 422).
	ErrInvalid = errors.New("invalid order")
	// ErrNotFound: no such order.
	ErrNotFound = errors.New("order not found")
	// ErrIdempotencyConflict: the idempotency key was used for a different
	// request.
	ErrIdempotencyConflict = errors.New("idempotency key already used for a different request")
)

// Validate checks a request against the rules that need no database.
func (r Request) Validate() error {
	if !idPattern.MatchString(r.CustomerID) {
		return fmt.Errorf("%w: customer_id must be 1-64 letters, digits or ._:- characters", ErrInvalid)
	}
	if len(r.Lines) == 0 {
		return fmt.Errorf("%w: items must not be empty", ErrInvalid)
	}
	if len(r.Lines) > MaxLines {
		return fmt.Errorf("%w: at most %d items per order", ErrInvalid, MaxLines)
	}
	seen := map[string]bool{}
	for i, l := range r.Lines {
		if !idPattern.MatchString(l.SKU) {
			return fmt.Errorf("%w: items[%d].sku must be 1-64 letters, digits or ._:- characters", ErrInvalid, i)
		}
		if l.Quantity <= 0 || l.Quantity > MaxQuantity {
			return fmt.Errorf("%w: items[%d].quantity must be between 1 and %d", ErrInvalid, i, MaxQuantity)
		}
		if seen[l.SKU] {
			return fmt.Errorf("%w: sku %s appears twice; put the total quantity on one line", ErrInvalid, l.SKU)
		}
		seen[l.SKU] = true
	}
	return nil
}

// Product is a catalogue entry.
type Product struct {
	SKU        string
	PriceCents int64
	Currency   string
}

// Price turns a validated request into priced items and a total, using the
// catalogue prices. Every SKU must exist and share one currency.
func Price(r Request, catalogue map[string]Product) ([]Item, int64, string, error) {
	items := make([]Item, 0, len(r.Lines))
	var total int64
	currency := ""
	for _, l := range r.Lines {
		p, ok := catalogue[l.SKU]
		if !ok {
			return nil, 0, "", fmt.Errorf("%w: unknown sku %s", ErrInvalid, l.SKU)
		}
		if currency != "" && p.Currency != currency {
			return nil, 0, "", fmt.Errorf("%w: items in different currencies", ErrInvalid)
		}
		currency = p.Currency
		items = append(items, Item{SKU: l.SKU, Quantity: l.Quantity, UnitPriceCents: p.PriceCents})
		total += p.PriceCents * int64(l.Quantity)
	}
	return items, total, currency, nil
}
