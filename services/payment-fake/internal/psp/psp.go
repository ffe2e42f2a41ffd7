package psp

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/relmsg/ordersaga/pkg/base/wire"
)

// Charge statuses.
const (
	StatusSucceeded = "succeeded"
	StatusDeclined  = "declined"
)

// Decline codes.
const (
	DeclineCardDeclined = "card_declined"
	DeclineAmountLimit  = "amount_limit"
)

// MaxAmountCents is the largest amount the PSP charges; above it a charge is
// declined with DeclineAmountLimit.
const MaxAmountCents = 500000

// The PSP's records and requests, as its API writes and reads them: the
// JSON is declared once, in pkg/base/wire, for the PSP and its clients alike.
type (
	// Charge is the PSP's record of one charge attempt. DeclineCode is
	// empty unless Status is StatusDeclined.
	Charge = wire.Charge
	// Refund is the PSP's record of one refund. Its Status is always
	// StatusSucceeded: a refund the PSP refuses is never stored.
	Refund = wire.PSPRefund
	// ChargeRequest is the body of POST /charges.
	ChargeRequest = wire.ChargeRequest
	// RefundRequest is the body of POST /refunds.
	RefundRequest = wire.RefundRequest
)

// Mode is what the fault switch does to charge and refund calls.
type Mode = wire.PSPMode

// Switch modes; the package comment explains each.
const (
	ModeNormal           Mode = "normal"
	ModeSlow             Mode = "slow"
	ModeLoseResponse     Mode = "lose-response"
	ModeFailBeforeCharge Mode = "fail-before-charge"
	ModeError5xx         Mode = "error-5xx"
	ModeDecline          Mode = "decline"
)

// MaxDelayMS bounds the delay of ModeSlow.
const MaxDelayMS = 120000

// Switch is the fault switch of one PSP instance, the body of PUT /switches
// and the answer of GET /switches. Count is how many following charge or
// refund calls it affects (0: all of them, until set back to normal); in
// GET /switches it is the number of calls left.
type Switch = wire.Switch

// validSwitch reports what is wrong with s, or nil.
func validSwitch(s Switch) error {
	switch s.Mode {
	case ModeNormal, ModeLoseResponse, ModeFailBeforeCharge, ModeError5xx, ModeDecline:
	case ModeSlow:
		if s.DelayMS <= 0 {
			return errors.New("mode slow needs delay_ms > 0")
		}
	default:
		return fmt.Errorf("mode must be one of normal, slow, lose-response, fail-before-charge, error-5xx, decline, not %q", s.Mode)
	}
	if s.DelayMS < 0 || s.DelayMS > MaxDelayMS {
		return fmt.Errorf("delay_ms must be between 0 and %d", MaxDelayMS)
	}
	if s.Count < 0 {
		return errors.New("count must not be negative")
	}
	return nil
}

// validCharge reports the first thing wrong with a charge request, or nil.
func validCharge(r ChargeRequest) error {
	if err := validKey("idempotency_key", r.IdempotencyKey, 128); err != nil {
		return err
	}
	if err := validKey("order_ref", r.OrderRef, 64); err != nil {
		return err
	}
	if r.CustomerID == "" || strings.TrimSpace(r.CustomerID) != r.CustomerID {
		return errors.New("customer_id is required, without surrounding spaces")
	}
	if !utf8.ValidString(r.CustomerID) || utf8.RuneCountInString(r.CustomerID) > 64 {
		return errors.New("customer_id must be valid UTF-8, at most 64 characters")
	}
	if r.AmountCents <= 0 {
		return errors.New("amount_cents must be a positive number of cents")
	}
	if len(r.Currency) != 3 || strings.Trim(r.Currency, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
		return errors.New("currency must be a three-letter upper-case ISO 4217 code, e.g. EUR")
	}
	return nil
}

// validRefund reports the first thing wrong with a refund request, or nil.
func validRefund(r RefundRequest) error {
	if err := validKey("idempotency_key", r.IdempotencyKey, 128); err != nil {
		return err
	}
	if err := validKey("charge_id", r.ChargeID, 64); err != nil {
		return err
	}
	if r.AmountCents <= 0 {
		return errors.New("amount_cents must be a positive number of cents")
	}
	return nil
}

// validKey accepts 1 to max printable ASCII characters without spaces: keys
// and references are stored as ASCII and travel in URL paths and queries.
func validKey(field, v string, max int) error {
	if v == "" {
		return fmt.Errorf("%s is required", field)
	}
	if len(v) > max {
		return fmt.Errorf("%s must be at most %d characters", field, max)
	}
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] > '~' {
			return fmt.Errorf("%s must be printable ASCII without spaces", field)
		}
	}
	return nil
}

// decide applies the decline rules of the package comment to a valid
// request; declineAll is the decline switch.
func decide(r ChargeRequest, declineAll bool) (status, declineCode string) {
	switch {
	case declineAll, strings.HasPrefix(r.CustomerID, "decline"):
		return StatusDeclined, DeclineCardDeclined
	case r.AmountCents > MaxAmountCents:
		return StatusDeclined, DeclineAmountLimit
	default:
		return StatusSucceeded, ""
	}
}

// sameCharge reports whether a stored charge was made by a request with the
// same parameters as r.
func sameCharge(c Charge, r ChargeRequest) bool {
	return c.OrderRef == r.OrderRef && c.CustomerID == r.CustomerID &&
		c.AmountCents == r.AmountCents && c.Currency == r.Currency
}

func sameRefund(f Refund, r RefundRequest) bool {
	return f.ChargeID == r.ChargeID && f.AmountCents == r.AmountCents
}

// Errors of the PSP's books; Server.httpError maps each to its HTTP answer.
var (
	errKeyReused      = errors.New("idempotency key reused with different parameters")
	errUnknownCharge  = errors.New("no charge with this charge_id")
	errChargeDeclined = errors.New("charge was declined: nothing to refund")
	errRefundTooLarge = errors.New("refund exceeds the charged amount")
	errNoCharge       = errors.New("no charge with this idempotency key")
	errNoRefund       = errors.New("no refund with this idempotency key")
)
