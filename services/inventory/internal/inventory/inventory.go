// Package inventory is the inventory domain: reservation statuses, the
// transition table of the saga as seen by the inventory service, the
// all-or-none plan of a reservation and the rules of a goods receipt.
// It is pure Go: no SQL, no AMQP, no HTTP.
package inventory

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// Status is where an order's reservation stands. There is at most one
// reservation per order: the order id is the idempotency key of the reserve
// step and of every compensation.
type Status string

const (
	// NoReservation is the start of every reservation: no row exists yet.
	// It is never stored.
	NoReservation Status = ""
	// Reserved: every item of the order is held (stock.reserved counts it).
	Reserved Status = "reserved"
	// Rejected: some item was short or unknown; nothing was held (all or
	// none). Terminal: there is nothing to compensate.
	Rejected Status = "rejected"
	// Committed: the order was paid; the held items left the stock
	// (on_hand and reserved both went down).
	Committed Status = "committed"
	// Released: the order was cancelled while reserved; the held items are
	// available again. Terminal.
	Released Status = "released"
	// Restocked: the order was cancelled after it was committed; the sold
	// items went back on the shelf (on_hand up). Terminal.
	Restocked Status = "restocked"
	// CancelledBeforeReserve: the cancel overtook the create. Nothing was
	// held, so the compensation had nothing to undo (the saga's "null
	// compensation"); the row stays as a marker so that the late create
	// finds the order id taken and reserves nothing (the "hanging"
	// protection). Terminal.
	CancelledBeforeReserve Status = "cancelled_before_reserve"
)

// Statuses lists every status, the unstored start first.
var Statuses = []Status{NoReservation, Reserved, Rejected, Committed, Released, Restocked, CancelledBeforeReserve}

// Terminal reports whether the reservation's saga is over: no trigger moves
// it anywhere else.
func (s Status) Terminal() bool {
	switch s {
	case Rejected, Released, Restocked, CancelledBeforeReserve:
		return true
	}
	return false
}

// Trigger is something that happened to a reservation.
type Trigger string

const (
	// Reserve: OrderCreated arrived and every item could be held.
	Reserve Trigger = "reserve"
	// Reject: OrderCreated arrived and some item was short or unknown.
	Reject Trigger = "reject"
	// Confirm: OrderConfirmed (the order was paid).
	Confirm Trigger = "confirm"
	// Cancel: OrderCancelled (payment failed, user cancel, deadline).
	Cancel Trigger = "cancel"
)

// Triggers lists every trigger.
var Triggers = []Trigger{Reserve, Reject, Confirm, Cancel}

// transitions is the saga from the inventory's point of view: for each
// status, the triggers it accepts and where they lead. Anything not listed
// is not a legal move (a duplicate, stale or out-of-order event): the
// caller records it and changes nothing. Terminal statuses accept nothing.
var transitions = map[Status]map[Trigger]Status{
	NoReservation: {
		Reserve: Reserved,
		Reject:  Rejected,
		Cancel:  CancelledBeforeReserve,
	},
	Reserved: {
		Confirm: Committed,
		Cancel:  Released,
	},
	Committed: {
		Cancel: Restocked,
	},
}

// Next returns where trigger t moves a reservation in status s, and whether
// the move is legal.
func Next(s Status, t Trigger) (Status, bool) {
	to, ok := transitions[s][t]
	return to, ok
}

// StockEffect is what a move does to the stock row of each item the
// reservation holds.
type StockEffect string

const (
	EffectNone    StockEffect = ""        // the move touches no stock
	EffectHold    StockEffect = "hold"    // reserved += q, only while on_hand - reserved >= q
	EffectCommit  StockEffect = "commit"  // on_hand -= q and reserved -= q: the goods are sold
	EffectRelease StockEffect = "release" // reserved -= q: the goods are available again
	EffectRestock StockEffect = "restock" // on_hand += q: sold goods come back
)

// effects completes the transition table: what each legal move does to the
// stock. A move that is not listed (a rejection, the cancel marker) touches
// no stock.
var effects = map[Status]map[Status]StockEffect{
	NoReservation: {Reserved: EffectHold},
	Reserved:      {Committed: EffectCommit, Released: EffectRelease},
	Committed:     {Restocked: EffectRestock},
}

// Effect returns what the move from -> to does to the stock of each held
// item.
func Effect(from, to Status) StockEffect { return effects[from][to] }

// Line is one item of a reservation.
type Line struct {
	SKU      string
	Quantity int
}

// Reservation is an order's reservation as the domain sees it.
type Reservation struct {
	OrderID uint64
	Status  Status
	Reason  string // why it was rejected, released or restocked
	Items   []Line // what is (or was) held; empty unless it was reserved
	Version uint64 // aggregate_version of the last event it emitted (0: none)
	// CreatedAt and UpdatedAt are set by the database.
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Stock is one SKU's stock. Available is what a new reservation may take.
type Stock struct {
	SKU       string
	OnHand    int64
	Reserved  int64
	UpdatedAt time.Time
}

// Available is on hand minus reserved.
func (s Stock) Available() int64 { return s.OnHand - s.Reserved }

var (
	// ErrInvalid wraps every reason an input is refused before anything is
	// written (HTTP 422; a dead letter for an event).
	ErrInvalid = errors.New("invalid input")
	// ErrUnknownSKU: no stock row for this SKU.
	ErrUnknownSKU = errors.New("unknown sku")
	// ErrNoReservation: no reservation for this order.
	ErrNoReservation = errors.New("reservation not found")
)

var skuPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)

// ValidSKU reports whether s can be a SKU (the order service's rule).
func ValidSKU(s string) bool { return skuPattern.MatchString(s) }

// Plan returns the lines of a reservation in the order they must be held:
// sorted by SKU, so two reservations touching the same SKUs always lock the
// stock rows in the same order and cannot deadlock each other. Holding is
// all or none: the caller holds each line with a conditional update in this
// order and undoes them all if one fails.
func Plan(lines []Line) ([]Line, error) {
	if len(lines) == 0 {
		return nil, fmt.Errorf("%w: a reservation needs at least one item", ErrInvalid)
	}
	out := append([]Line(nil), lines...)
	sort.Slice(out, func(i, j int) bool { return out[i].SKU < out[j].SKU })
	for i, l := range out {
		if !ValidSKU(l.SKU) {
			return nil, fmt.Errorf("%w: bad sku %q", ErrInvalid, l.SKU)
		}
		if l.Quantity <= 0 {
			return nil, fmt.Errorf("%w: quantity of %s must be positive", ErrInvalid, l.SKU)
		}
		if i > 0 && out[i-1].SKU == l.SKU {
			return nil, fmt.Errorf("%w: sku %s appears twice", ErrInvalid, l.SKU)
		}
	}
	return out, nil
}

// Shortage is why a reservation was rejected: the first line, in plan
// order, that could not be held.
type Shortage struct {
	SKU       string
	Requested int
	Available int64
	Known     bool // false: no such SKU
}

// Reason is the rejection reason stored on the reservation and sent in
// InventoryRejected.
func (s Shortage) Reason() string {
	if !s.Known {
		return fmt.Sprintf("unknown SKU %s: requested %d", s.SKU, s.Requested)
	}
	return fmt.Sprintf("insufficient stock for %s: requested %d, available %d", s.SKU, s.Requested, max(s.Available, 0))
}

// MaxReasonLen is the width of reservations.reason.
const MaxReasonLen = 255

// ClipReason makes a reason fit reservations.reason: valid UTF-8, at most
// MaxReasonLen characters (an upstream reason may be anything).
func ClipReason(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if utf8.RuneCountInString(s) <= MaxReasonLen {
		return s
	}
	return string([]rune(s)[:MaxReasonLen-1]) + "…"
}

// Goods receipts: quantities per receipt, and a ceiling on on_hand far
// below the column's 4,294,967,295 so no sum of receipts can overflow it.
const (
	MaxReceipt = 1_000_000
	MaxOnHand  = 1_000_000_000
)

// ValidateReceipt checks the quantity of a goods receipt.
func ValidateReceipt(quantity int) error {
	if quantity < 1 || quantity > MaxReceipt {
		return fmt.Errorf("%w: quantity must be between 1 and %d", ErrInvalid, MaxReceipt)
	}
	return nil
}
