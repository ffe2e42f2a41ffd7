// Package payment is the payment domain: the statuses of an order's charge,
// the transition table that moves them, and the rules a new payment must
// meet. It is pure Go: no SQL, no AMQP, no HTTP, and it does not know the
// PSP's wire types either (paymentapp translates a PSP answer into a
// Trigger).
package payment

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Status is where an order's payment stands.
type Status string

const (
	Pending   Status = "pending"   // charge requested; the PSP's answer is not recorded yet
	Succeeded Status = "succeeded" // the PSP charged the amount
	Failed    Status = "failed"    // the PSP declined; nothing was charged
)

// Statuses lists every status, in saga order. A later step adds
// "refunded" (after succeeded, for a cancelled order); succeeded then
// stops being terminal.
var Statuses = []Status{Pending, Succeeded, Failed}

// Valid reports whether s is a known status.
func (s Status) Valid() bool {
	for _, v := range Statuses {
		if v == s {
			return true
		}
	}
	return false
}

// Terminal reports whether the payment is decided for good: no trigger
// moves it anywhere else.
func (s Status) Terminal() bool { return s == Succeeded || s == Failed }

// Trigger is an outcome learnt from the PSP.
type Trigger string

const (
	ChargeSucceeded Trigger = "charge_succeeded" // the PSP's charge record says succeeded
	ChargeDeclined  Trigger = "charge_declined"  // the PSP's charge record says declined
)

// Triggers lists every trigger.
var Triggers = []Trigger{ChargeSucceeded, ChargeDeclined}

// transitions is the payment's state machine: for each status, the
// triggers it accepts and where they lead. Anything not listed is not a
// legal move; terminal statuses accept nothing.
//
// "No answer" from the PSP (a timeout, a dropped connection, a 5xx) is
// deliberately not a trigger: it decides nothing. The payment stays
// pending until a status query with the same idempotency key finds the
// charge record.
var transitions = map[Status]map[Trigger]Status{
	Pending: {
		ChargeSucceeded: Succeeded,
		ChargeDeclined:  Failed,
	},
}

// Next returns where trigger t moves a payment in status s, and whether
// the move is legal. An illegal move means the payment was decided already
// (a redelivered or repeated outcome): the caller changes nothing.
func Next(s Status, t Trigger) (Status, bool) {
	to, ok := transitions[s][t]
	return to, ok
}

// Payment is one order's charge as the payment service records it.
type Payment struct {
	OrderID        uint64
	CustomerID     string // opaque id, passed to the PSP
	AmountCents    int64
	Currency       string
	Status         Status
	IdempotencyKey string // sent with every charge attempt and status query
	PSPChargeID    string // the PSP's charge id; empty until charged
	FailureReason  string // the PSP's decline code when failed
	Version        uint64 // aggregate_version of the last event emitted
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

var (
	// ErrInvalid wraps every reason a payment cannot be created from the
	// facts given (the event carrying them can never be processed).
	ErrInvalid = errors.New("invalid payment")
	// ErrNotFound: no payment for this order.
	ErrNotFound = errors.New("payment not found")
)

// ChargeKey is the idempotency key of an order's charge at the PSP: one per
// order, derived from the order id, so every attempt for the order (a
// redelivery, a retry after an unknown outcome, a redriven dead letter)
// carries the same key and the PSP charges at most once.
func ChargeKey(orderID uint64) string { return "charge-" + strconv.FormatUint(orderID, 10) }

// New returns the pending payment of an order, first event version 1 (the
// charge request), or an error wrapping ErrInvalid.
func New(orderID uint64, customerID string, amountCents int64, currency string) (Payment, error) {
	p := Payment{OrderID: orderID, CustomerID: customerID, AmountCents: amountCents, Currency: currency,
		Status: Pending, IdempotencyKey: ChargeKey(orderID), Version: 1}
	return p, p.validate()
}

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
