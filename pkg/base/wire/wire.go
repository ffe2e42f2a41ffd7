// Package wire is the JSON of the HTTP APIs, declared once: the services'
// handlers write these types, and every program that reads an answer
// (the order service's peer client, the failure lab, the chaos run, the
// load generator, the viewer, the tests) decodes into them. It sits in
// pkg/ so that tools outside the services may import it, which the
// services' internal packages forbid.
//
// docs/openapi.yaml is the contract; TestTypesMatchTheDocument
// (internal/contract) compares every type here with its schema there,
// field by field: a field added, renamed, retyped or made optional on one
// side only fails the suite. The types carry data only; the rules
// (what a valid order is, which status may follow which) stay in the
// services' domain packages.
package wire

import "time"

// --- the order service -----------------------------------------------------

// Order statuses and refund statuses (docs/contract.md, "State machines").
const (
	OrderPendingInventory = "pending_inventory"
	OrderAwaitingPayment  = "awaiting_payment"
	OrderConfirmed        = "confirmed"
	OrderRejected         = "rejected"
	OrderCancelled        = "cancelled"

	RefundNone     = "none"
	RefundPending  = "pending"
	RefundRefunded = "refunded"
)

// Order is an order as every order endpoint shows it (schema Order).
type Order struct {
	OrderID string `json:"order_id"` // a decimal string
	Status  string `json:"status"`
	// StatusReason says why the order was rejected or cancelled; absent
	// when empty.
	StatusReason string      `json:"status_reason,omitempty"`
	RefundStatus string      `json:"refund_status"`
	CustomerID   string      `json:"customer_id"`
	Items        []OrderItem `json:"items,omitempty"` // absent in lists, which read no lines
	TotalCents   int64       `json:"total_cents"`
	Currency     string      `json:"currency"`
	CreatedAt    time.Time   `json:"created_at"`
	UpdatedAt    time.Time   `json:"updated_at"`
	// DeadlineAt is when the current wait runs out; absent once the order
	// waits for nobody.
	DeadlineAt *time.Time `json:"deadline_at,omitempty"`
}

// Terminal reports whether the order's status accepts no more moves.
func (o Order) Terminal() bool {
	return o.Status == OrderConfirmed || o.Status == OrderRejected || o.Status == OrderCancelled
}

// OrderItem is one line of an order, at the catalogue's price of the time.
type OrderItem struct {
	SKU            string `json:"sku"`
	Quantity       int    `json:"quantity"`
	UnitPriceCents int64  `json:"unit_price_cents"`
}

// OrderList is GET /orders and GET /admin/deadlines.
type OrderList struct {
	Orders []Order `json:"orders"`
}

// CreateOrderRequest is the body of POST /orders.
type CreateOrderRequest struct {
	CustomerID string      `json:"customer_id"`
	Items      []OrderLine `json:"items"`
}

// OrderLine is a line of a create request: the price comes from the
// catalogue, never from the client.
type OrderLine struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// CancelOrderRequest is the optional body of POST /orders/{id}/cancel.
type CancelOrderRequest struct {
	Reason string `json:"reason,omitempty"`
}

// Results of a cancel.
const (
	CancelCancelled        = "cancelled"
	CancelAlreadyCancelled = "already_cancelled"
	CancelAlreadyRejected  = "already_rejected"
)

// CancelResult is the answer of POST /orders/{id}/cancel.
type CancelResult struct {
	Result string `json:"result"`
	Order  Order  `json:"order"`
}

// --- the inventory service ---------------------------------------------------

// Stock is one SKU's stock (GET /stock/{sku}, a receipt's answer).
type Stock struct {
	SKU       string `json:"sku"`
	OnHand    int64  `json:"on_hand"`
	Reserved  int64  `json:"reserved"`
	Available int64  `json:"available"`
}

// StockList is GET /stock.
type StockList struct {
	Stock []Stock `json:"stock"`
}

// ReceiptRequest is the body of POST /stock/{sku}/receipts.
type ReceiptRequest struct {
	Quantity int `json:"quantity"`
}

// Reservation is inventory's record of an order (GET /reservations/{order_id}).
type Reservation struct {
	OrderID string            `json:"order_id"`
	Status  string            `json:"status"`
	Reason  string            `json:"reason"`
	Items   []ReservationLine `json:"items"`
	// ExpiresAt is the end of the lease: null for a reservation that never
	// held stock.
	ExpiresAt *time.Time `json:"expires_at"`
	// ExpiredAt is when the lease sweep released it: null unless the lease
	// ran out.
	ExpiredAt *time.Time `json:"expired_at"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
}

// ReservationLine is one reserved line: a SKU and a quantity, as a create
// request's line.
type ReservationLine = OrderLine

// Gap is an ordering gap inventory recorded (GET /admin/gaps).
type Gap struct {
	ID              uint64     `json:"id"`
	Consumer        string     `json:"consumer"`
	AggregateID     string     `json:"aggregate_id"` // the order id
	EventID         string     `json:"event_id"`
	EventType       string     `json:"event_type"`
	ReceivedVersion uint64     `json:"received_version"`
	ExpectedVersion uint64     `json:"expected_version"`
	DetectedAt      time.Time  `json:"detected_at"`
	DeadlineAt      time.Time  `json:"deadline_at"`
	Overdue         bool       `json:"overdue"`
	AlertedAt       *time.Time `json:"alerted_at"`
	ResolvedAt      *time.Time `json:"resolved_at"`
	Resolution      string     `json:"resolution"`
}

// GapList is GET /admin/gaps.
type GapList struct {
	Gaps []Gap `json:"gaps"`
}

// --- the payment service -----------------------------------------------------

// Payment is payment's record of an order (GET /payments/{order_id}).
// PSPChargeID and FailureReason are empty until the PSP answered.
type Payment struct {
	OrderID         string     `json:"order_id"`
	Status          string     `json:"status"`
	AmountCents     int64      `json:"amount_cents"`
	Currency        string     `json:"currency"`
	CustomerID      string     `json:"customer_id"`
	IdempotencyKey  string     `json:"idempotency_key"`
	PSPChargeID     string     `json:"psp_charge_id"`
	FailureReason   string     `json:"failure_reason"`
	ChargeSent      bool       `json:"charge_sent"`
	CancelRequested bool       `json:"cancel_requested"`
	CancelReason    string     `json:"cancel_reason"`
	DeadlineAt      *time.Time `json:"deadline_at"` // null for a cancel marker
	Attempts        int        `json:"attempts"`
	LastError       string     `json:"last_error"`
	ParkedReason    string     `json:"parked_reason"`
	// Refund is null until a refund is requested.
	Refund    *PaymentRefund `json:"refund"`
	CreatedAt time.Time      `json:"created_at"`
	UpdatedAt time.Time      `json:"updated_at"`
}

// PaymentRefund is the refund of an order's payment.
type PaymentRefund struct {
	Status         string    `json:"status"`
	AmountCents    int64     `json:"amount_cents"`
	IdempotencyKey string    `json:"idempotency_key"`
	PSPChargeID    string    `json:"psp_charge_id"`
	PSPRefundID    string    `json:"psp_refund_id"`
	Reason         string    `json:"reason"`
	DeadlineAt     time.Time `json:"deadline_at"`
	Attempts       int       `json:"attempts"`
	LastError      string    `json:"last_error"`
	ParkedReason   string    `json:"parked_reason"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// PaymentOutcome is payment's answer to "what became of this order's
// charge?" (GET /payments/{order_id}/outcome).
type PaymentOutcome struct {
	OrderID       string `json:"order_id"`
	Outcome       string `json:"outcome"`        // succeeded, declined, refunded, not_charged, unknown
	Source        string `json:"source"`         // record or psp
	PaymentStatus string `json:"payment_status"` // the payment's status when asked
	PSPChargeID   string `json:"psp_charge_id"`
	Detail        string `json:"detail"`
}

// NeedsAttention is GET /admin/needs-attention.
type NeedsAttention struct {
	Charges []ParkedCharge `json:"charges"`
	Refunds []ParkedRefund `json:"refunds"`
}

// ParkedCharge is a payment parked as needs_attention, with its evidence.
type ParkedCharge struct {
	Payment
	SweepRounds int       `json:"sweep_rounds"`
	ParkedAt    time.Time `json:"parked_at"`
}

// ParkedRefund is a refund parked as needs_attention.
type ParkedRefund struct {
	OrderID string `json:"order_id"`
	PaymentRefund
	SweepRounds int       `json:"sweep_rounds"`
	ParkedAt    time.Time `json:"parked_at"`
}

// RetryParkedResult is POST /admin/needs-attention/{order_id}/retry.
type RetryParkedResult struct {
	OrderID string `json:"order_id"`
	Kind    string `json:"kind"`     // charge or refund
	Status  string `json:"status"`   // pending or requested
	EventID string `json:"event_id"` // the new request event, or empty
}

// --- the fake PSP --------------------------------------------------------------

// Charge is the PSP's record of one charge attempt. DeclineCode is empty
// unless Status is "declined".
type Charge struct {
	ChargeID       string    `json:"charge_id"`
	IdempotencyKey string    `json:"idempotency_key"`
	OrderRef       string    `json:"order_ref"`
	CustomerID     string    `json:"customer_id"`
	AmountCents    int64     `json:"amount_cents"`
	Currency       string    `json:"currency"`
	Status         string    `json:"status"`
	DeclineCode    string    `json:"decline_code"`
	CreatedAt      time.Time `json:"created_at"`
}

// ChargeList is GET /psp/charges?order_ref=.
type ChargeList struct {
	Charges []Charge `json:"charges"`
}

// ChargeRequest is the body of POST /psp/charges.
type ChargeRequest struct {
	IdempotencyKey string `json:"idempotency_key"`
	OrderRef       string `json:"order_ref"`
	CustomerID     string `json:"customer_id"`
	AmountCents    int64  `json:"amount_cents"`
	Currency       string `json:"currency"`
}

// PSPRefund is the PSP's record of one refund; its Status is always
// "succeeded" (a refund the PSP refuses is never stored).
type PSPRefund struct {
	RefundID       string    `json:"refund_id"`
	IdempotencyKey string    `json:"idempotency_key"`
	ChargeID       string    `json:"charge_id"`
	AmountCents    int64     `json:"amount_cents"`
	Status         string    `json:"status"`
	CreatedAt      time.Time `json:"created_at"`
}

// PSPRefundList is GET /psp/refunds?charge_id=.
type PSPRefundList struct {
	Refunds []PSPRefund `json:"refunds"`
}

// RefundRequest is the body of POST /psp/refunds.
type RefundRequest struct {
	IdempotencyKey string `json:"idempotency_key"`
	ChargeID       string `json:"charge_id"`
	AmountCents    int64  `json:"amount_cents"`
}

// PSPMode is what the PSP's fault switch does to charge and refund calls.
type PSPMode string

// Switch is the PSP's fault switch: the body of PUT /psp/switches and the
// answer of GET. Count is how many following calls it affects (0: all of
// them); in an answer, the calls left.
type Switch struct {
	Mode    PSPMode `json:"mode"`
	DelayMS int     `json:"delay_ms"`
	Count   int     `json:"count"`
}

// --- every service -----------------------------------------------------------

// Health is GET /healthz: a restart shows as a new StartedAt.
type Health struct {
	Status    string    `json:"status"`
	StartedAt time.Time `json:"started_at"`
}
