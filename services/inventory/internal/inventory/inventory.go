// Package inventory is the inventory domain: reservation statuses, the
// transition table of the saga as seen by the inventory service, the
// all-or-none plan of a reservation and the rules of a goods receipt.
// It is pure Go: no SQL, no AMQP, no HTTP.
//
// # Reservation expiry vs late payment
//
// A reservation holds stock for a lease (RESERVATION_TTL), not forever: a
// payment that never resolves must not hide stock from other customers. When
// the lease runs out the stock is released (reserved -> expired) and
// InventoryReservationExpired is emitted. The payment may still be in flight
// and succeed afterwards; the order then confirms an order whose stock is no
// longer held. Two answers are possible: refund and cancel at once, or try
// to take the stock again. This service tries first:
//
//   - OrderConfirmed for an expired reservation takes every item again in
//     one go, all or none, with the same conditional decrement a reservation
//     uses (only while on_hand - reserved covers it). If that works the sale
//     happens as if the lease had not run out (expired -> committed): the
//     customer paid and gets the goods, and nothing has to be undone.
//   - If some item is gone (another order took the released stock), nothing
//     is taken (expired -> commit_failed) and InventoryCommitFailed is
//     emitted with the reason: the order service cancels the order and the
//     payment service refunds the charge. That compensation is a new
//     business transaction, decided from this persisted status.
//
// Why not always refund: most late payments find their stock still there
// (the lease is a backstop, longer than the order's payment deadline), and a
// refund of a customer who paid in time for goods on the shelf is the worse
// outcome. Why not always re-reserve: stock may be gone, and overselling is
// not an option; so the attempt is a conditional update, never a blind
// decrement, and its failure is a result event, not a retry.
//
// An OrderCancelled for an expired reservation releases nothing (the expiry
// already did) but moves it to released, so that a late OrderConfirmed
// arriving after the cancel (cancel-after-confirm overtaking its confirm)
// finds a terminal status and cannot take stock for a cancelled order.
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
	// Expired: the lease ran out before the order was confirmed; the held
	// items are available again. Not terminal: a late confirm may still
	// take them again (see the package comment).
	Expired Status = "expired"
	// CommitFailed: the order was confirmed after its lease ran out and some
	// item was gone by then; nothing was taken. InventoryCommitFailed tells
	// the order to cancel and refund. Terminal.
	CommitFailed Status = "commit_failed"
)

// Statuses lists every status, the unstored start first.
var Statuses = []Status{NoReservation, Reserved, Rejected, Committed, Released, Restocked, CancelledBeforeReserve,
	Expired, CommitFailed}

// Terminal reports whether the reservation's saga is over: no trigger moves
// it anywhere else.
func (s Status) Terminal() bool {
	switch s {
	case Rejected, Released, Restocked, CancelledBeforeReserve, CommitFailed:
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
	// CancelSold: OrderCancelled of an order that was confirmed (its
	// after_confirm flag): the sale happened, even if its OrderConfirmed
	// has not arrived here yet, so the reservation ends restocked, never
	// released, and the late confirm finds it closed.
	CancelSold Trigger = "cancel-sold"
	// Expire: the reservation's lease ran out (the sweep, not an event).
	Expire Trigger = "expire"
	// ConfirmShort: OrderConfirmed arrived for an expired reservation and
	// some item could not be taken again. (Confirm from expired means every
	// item could.)
	ConfirmShort Trigger = "confirm-short"
)

// Triggers lists every trigger.
var Triggers = []Trigger{Reserve, Reject, Confirm, Cancel, CancelSold, Expire, ConfirmShort}

// transitions is the saga from the inventory's point of view: for each
// status, the triggers it accepts and where they lead. Anything not listed
// is not a legal move (a duplicate, stale or out-of-order event): the
// caller records it and changes nothing. Terminal statuses accept nothing.
var transitions = map[Status]map[Trigger]Status{
	NoReservation: {
		Reserve:    Reserved,
		Reject:     Rejected,
		Cancel:     CancelledBeforeReserve,
		CancelSold: CancelledBeforeReserve,
	},
	Reserved: {
		Confirm: Committed,
		Cancel:  Released,
		// The cancel of a sale overtook its confirm: sold and returned.
		CancelSold: Restocked,
		Expire:     Expired,
	},
	Committed: {
		Cancel:     Restocked,
		CancelSold: Restocked,
	},
	Expired: {
		Confirm:      Committed,
		ConfirmShort: CommitFailed,
		Cancel:       Released,
		CancelSold:   Restocked,
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
	// EffectTake sells goods that are not held: on_hand -= q, only while
	// on_hand - reserved >= q (a late confirm after the lease ran out).
	EffectTake StockEffect = "take"
)

// effects completes the transition table: what each legal move does to the
// stock. A move that is not listed (a rejection, the cancel marker, a failed
// late commit, a cancel after the expiry released everything) touches no
// stock.
var effects = map[Status]map[Status]StockEffect{
	NoReservation: {Reserved: EffectHold},
	// Reserved -> restocked: the sale (on_hand -= q, reserved -= q) and its
	// return (on_hand += q) together leave reserved -= q.
	Reserved:  {Committed: EffectCommit, Released: EffectRelease, Expired: EffectRelease, Restocked: EffectRelease},
	Committed: {Restocked: EffectRestock},
	Expired:   {Committed: EffectTake},
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
	// ExpiresAt is the end of the lease of a reservation that held stock
	// (zero for one that never did); ExpiredAt is when the sweep released
	// it (zero unless the lease ran out). Both are database time.
	ExpiresAt time.Time
	ExpiredAt time.Time
	// CreatedAt and UpdatedAt are set by the database.
	CreatedAt time.Time
	UpdatedAt time.Time
}

// CreatedVersion is the aggregate_version of OrderCreated: the first event
// of every order. An order event that finds no reservation row (and is not
// the create) shows that version was not seen: a gap.
const CreatedVersion = 1

// Gap records that an event arrived whose aggregate_version showed that an
// earlier event of the same order had not been seen. It is open until the
// missing event arrives (or an operator resolves it), and overdue once
// DeadlineAt has passed while open.
type Gap struct {
	ID              uint64
	Consumer        string
	OrderID         uint64
	EventID         string // the event that revealed the gap
	EventType       string
	ReceivedVersion uint64
	ExpectedVersion uint64 // the first version that should have come before
	DetectedAt      time.Time
	DeadlineAt      time.Time
	AlertedAt       time.Time // zero until the gap check logged it as overdue
	ResolvedAt      time.Time // zero while open
	Resolution      string
	Overdue         bool // open and past its deadline, in database time
}

// Open reports whether the gap is not resolved yet.
func (g Gap) Open() bool { return g.ResolvedAt.IsZero() }

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
	// ErrNoGap: no event gap with this id.
	ErrNoGap = errors.New("gap not found")
	// ErrGapResolved: the gap is already resolved.
	ErrGapResolved = errors.New("gap already resolved")
	// ErrNoReceipt: no goods receipt was recorded under this key.
	ErrNoReceipt = errors.New("receipt not found")
	// ErrKeyReused: the receipt's Idempotency-Key came with another SKU or
	// quantity before (HTTP 422).
	ErrKeyReused = errors.New("idempotency key already used for a different request")
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
