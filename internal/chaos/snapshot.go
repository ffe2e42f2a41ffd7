package chaos

import (
	"net/http"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/wire"
)

// Snapshot is everything the checks look at: what the load sent and was
// answered, and what the three services show once the system is at rest,
// read through their HTTP endpoints only. Check is a pure function of it,
// so a snapshot can be built by hand (selftest, unit tests) as well as
// observed from a live stack.
type Snapshot struct {
	Requests []Request        `json:"requests"`
	Orders   map[string]Order `json:"orders"` // every order created during the run, by order id
	// Run customers: the load gives each idempotency key a customer of its
	// own, so the orders of one key are the orders of one customer.

	StockStart map[string]Stock `json:"stock_start"`
	StockEnd   map[string]Stock `json:"stock_end"`
	Receipts   map[string]int   `json:"receipts"` // units received through POST /stock/{sku}/receipts during the run
	// UncertainReceipts are units whose receipt got no definite answer:
	// they may or may not be on hand.
	UncertainReceipts map[string]int `json:"uncertain_receipts,omitempty"`
	MinAvailable      map[string]int `json:"min_available"` // lowest available seen by the samples taken while running

	Services map[string]Leftovers `json:"services"` // by service: order, inventory, payment
	Rest     Rest                 `json:"rest"`

	// Faults are the faults as they happened, with what each reached.
	Faults []FaultRecord `json:"faults,omitempty"`
	// Processes counts the processes each instance ran during the run
	// (1: it never started again), seen by its /healthz start time.
	Processes map[string]int `json:"processes,omitempty"`
	// Broker is what the broker still holds at rest for the consumers, by
	// queue (their queues, dead queues and retry tiers): ready messages,
	// and on a cluster of the stack's own every message of the quorum
	// queue, dead-lettered ones waiting to be forwarded included.
	Broker map[string]int `json:"broker,omitempty"`
}

// Kind is what a request of the load tests; it decides the outcome the
// order must reach.
type Kind string

// The load's kinds.
const (
	KindHappy        Kind = "happy"        // stock and payment fine: confirmed
	KindInsufficient Kind = "insufficient" // a line for a SKU without stock: rejected, nothing held
	KindScarce       Kind = "scarce"       // one unit of the scarce SKU, raced by many: confirmed or rejected
	KindDecline      Kind = "decline"      // a customer the PSP declines: cancelled
	KindCancel       Kind = "cancel"       // the client cancels at a random moment: cancelled
	KindReplay       Kind = "replay"       // the same key sent again later and concurrently: one order
	KindConflict     Kind = "conflict"     // the same key with another body: 422, the first order stands
)

// Kinds lists every kind, in report order.
var Kinds = []Kind{KindHappy, KindInsufficient, KindScarce, KindDecline, KindCancel, KindReplay, KindConflict}

// Line is one order line (a create request's, a reservation's).
type Line = wire.OrderLine

// Request is one idempotency key of the load: what was sent with it and
// every answer it got.
type Request struct {
	Key      string    `json:"key"`
	Kind     Kind      `json:"kind"`
	Customer string    `json:"customer"`
	Items    []Line    `json:"items"`
	Sent     time.Time `json:"sent"` // the first POST
	// Creates are the POSTs with the original body: the first, the retries
	// of indefinite answers, the replays (later and concurrent).
	Creates []Answer `json:"creates"`
	// Conflicts are POSTs with the same key and another body.
	Conflicts []Answer `json:"conflicts,omitempty"`
	// Cancels are the POST /orders/{id}/cancel of a cancel request.
	Cancels []Answer `json:"cancels,omitempty"`
}

// Answer is one HTTP exchange of the load.
type Answer struct {
	At       time.Duration `json:"at_ns"`  // since the run started
	Status   int           `json:"status"` // 0: no answer (connection refused, reset, timeout)
	Error    string        `json:"error,omitempty"`
	OrderID  string        `json:"order_id,omitempty"`
	Total    int64         `json:"total_cents,omitempty"`
	Replayed bool          `json:"replayed,omitempty"` // header Idempotent-Replayed: true
	Result   string        `json:"result,omitempty"`   // cancel: cancelled, already_cancelled, already_rejected
}

// Definite reports whether the answer settles the request: any 2xx or 4xx
// but 409. No answer and 5xx leave the outcome unknown, and 409 says the
// first request with the key is still in flight (the Idempotency-Key
// draft), so the load asks again with the same key.
func (a Answer) Definite() bool {
	return a.Status >= 200 && a.Status < 500 && a.Status != http.StatusConflict
}

// OrderIDs returns the distinct order ids the 2xx create answers named.
func (r Request) OrderIDs() []string {
	var ids []string
	for _, a := range r.Creates {
		if a.Status/100 == 2 && a.OrderID != "" && !contains(ids, a.OrderID) {
			ids = append(ids, a.OrderID)
		}
	}
	return ids
}

// Accepted reports whether some create answer accepted the request.
func (r Request) Accepted() bool { return len(r.OrderIDs()) > 0 }

// Order is one order as the stack shows it at rest.
type Order struct {
	ID           string    `json:"order_id"`
	Customer     string    `json:"customer_id"`
	Status       string    `json:"status"`
	StatusReason string    `json:"status_reason,omitempty"`
	RefundStatus string    `json:"refund_status"`
	TotalCents   int64     `json:"total_cents"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`

	Reservation *Reservation `json:"reservation"` // inventory's record; nil: none
	Payment     *Payment     `json:"payment"`     // payment's record; nil: none
	Charges     []Charge     `json:"charges"`     // the PSP's books
	History     []Change     `json:"history"`     // order_history, oldest first
	Outbox      []Event      `json:"outbox"`      // every service's outbox rows for the order
}

// Reservation is inventory's record of an order.
type Reservation = wire.Reservation

// Payment is the payment service's record of an order.
type Payment struct {
	Status       string `json:"status"`
	AmountCents  int64  `json:"amount_cents"`
	RefundStatus string `json:"refund_status,omitempty"` // "": no refund row
}

// Charge is one charge in the PSP's books, with what was refunded of it.
type Charge struct {
	ChargeID      string `json:"charge_id"`
	Status        string `json:"status"` // succeeded, declined
	AmountCents   int64  `json:"amount_cents"`
	RefundedCents int64  `json:"refunded_cents"`
}

// Change is one order_history row.
type Change struct {
	From    string    `json:"from"` // "" for the creation
	To      string    `json:"to"`
	Trigger string    `json:"trigger"`
	Actor   string    `json:"actor"`
	EventID string    `json:"event_id,omitempty"` // the consumed event that caused it
	At      time.Time `json:"at"`
}

// Event is one outbox row of one service.
type Event struct {
	Service  string `json:"service"`
	EventID  string `json:"event_id"`
	Type     string `json:"event_type"`
	Version  uint64 `json:"aggregate_version"`
	Status   string `json:"status"`
	Attempts int    `json:"attempts"`
}

// Stock is one SKU's stock.
type Stock struct {
	OnHand    int `json:"on_hand"`
	Reserved  int `json:"reserved"`
	Available int `json:"available"`
}

// Leftovers is what one service still holds that a system at rest must
// not: rows that are not new since the run started are left out (a live
// stack may carry an earlier run's).
type Leftovers struct {
	Outbox         map[string]int64 `json:"outbox"`                  // pending and sending rows now
	FailedEvents   []Item           `json:"failed_events,omitempty"` // outbox rows that ended failed
	DeadLetters    []Item           `json:"dead_letters,omitempty"`
	Parked         []Item           `json:"parked,omitempty"`
	Gaps           []Item           `json:"gaps,omitempty"`            // inventory: open ordering gaps
	NeedsAttention []Item           `json:"needs_attention,omitempty"` // payment: parked charges and refunds
}

// Item is one leftover row, named for a reader.
type Item struct {
	ID     string `json:"id"`
	Detail string `json:"detail"`
}

// Rest says whether and when the system came to rest after the heal.
type Rest struct {
	Reached bool          `json:"reached"`
	After   time.Duration `json:"after_ns"`          // from the end of the heal
	Waiting string        `json:"waiting,omitempty"` // what it still waited for when it gave up
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
