// Package peerclient is the order service's HTTP client of the other
// services: their public records (GET /reservations/{order_id}, GET
// /payments/{order_id}) and their admin views of the messaging tables
// (/admin/outbox, /admin/inbox, the retry of a failed event). The
// reconciler and the per-order timeline use it. Services never read each
// other's tables: this is the only way the order service learns what the
// others recorded.
//
// Nothing here calls the payment provider (PSP), and nothing here can
// charge: the payment service's public and admin endpoints are read-only
// except the outbox retry, which re-sends an event with its original id.
// The deadline sweep asks payment for a charge's outcome, which payment may
// look up at the PSP by the charge's key (a status query, never a charge).
package peerclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/endpoints"
	"github.com/relmsg/ordersaga/pkg/base/wire"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/outbox"
)

// The services the order service talks to.
const (
	InventoryService = "inventory"
	PaymentService   = "payment"
)

// Client asks inventory and payment over HTTP.
type Client struct {
	urls  map[string]*endpoints.List // service -> its instances' base URLs
	token string                     // ADMIN_TOKEN, sent to the /admin endpoints
	http  *http.Client
}

// New returns a client. inventoryURL and paymentURL are each one base URL
// or a comma-separated list of a service's instances (checked with
// endpoints.Parse; bad entries are left out): a request that gets no HTTP
// answer goes on to the next instance, starting from the last one that
// answered. Every call here is a read, or a retry keyed by the event's own
// id, so sending it again to another instance is safe. timeout bounds each
// request.
func New(inventoryURL, paymentURL, adminToken string, timeout time.Duration) *Client {
	inv, _ := endpoints.Parse(inventoryURL)
	pay, _ := endpoints.Parse(paymentURL)
	return &Client{
		urls:  map[string]*endpoints.List{InventoryService: inv, PaymentService: pay},
		token: adminToken,
		http:  &http.Client{Timeout: timeout},
	}
}

// Answer is what a service said, kept verbatim for evidence.
type Answer struct {
	Asked      string          `json:"asked"`       // method and URL path
	HTTPStatus int             `json:"http_status"` // 0: no answer
	AnsweredAt time.Time       `json:"answered_at"` // our clock, when the answer arrived
	Body       json.RawMessage `json:"body,omitempty"`
	Error      string          `json:"error,omitempty"`
}

// Found reports whether the service has the record (200).
func (a Answer) Found() bool { return a.HTTPStatus == http.StatusOK }

// Answered reports whether the service gave a definite answer: the record
// (200) or "no such record" (404).
func (a Answer) Answered() bool {
	return a.HTTPStatus == http.StatusOK || a.HTTPStatus == http.StatusNotFound
}

// The records the other services answer with, as their APIs write them
// (pkg/base/wire, held to docs/openapi.yaml).
type (
	// Reservation is inventory's record of an order (GET /reservations/{order_id}).
	Reservation = wire.Reservation
	// Payment is payment's record of an order (GET /payments/{order_id}).
	Payment = wire.Payment
	// Refund is the refund part of a payment.
	Refund = wire.PaymentRefund
	// PaymentOutcome is payment's answer to "what became of this order's
	// charge?" (GET /payments/{order_id}/outcome): from its record when it
	// is decided, else from the PSP, asked by the charge's idempotency key.
	PaymentOutcome = wire.PaymentOutcome
)

// OutboxEvent is a row of a service's outbox (GET /admin/outbox): the
// outbox's own row type, as every service's admin API writes it.
type OutboxEvent = outbox.Row

// InboxRow is a row of a service's inbox (GET /admin/inbox).
type InboxRow = inbox.Row

// Reservation asks inventory for an order's reservation. The error is set
// only when the answer is neither the record nor a 404; the Answer is
// always filled in for the evidence.
func (c *Client) Reservation(ctx context.Context, orderID uint64) (*Reservation, Answer, error) {
	return ask[Reservation](ctx, c, InventoryService, "/reservations/"+strconv.FormatUint(orderID, 10), false)
}

// Payment asks payment for an order's payment (with its refund, if any).
func (c *Client) Payment(ctx context.Context, orderID uint64) (*Payment, Answer, error) {
	return ask[Payment](ctx, c, PaymentService, "/payments/"+strconv.FormatUint(orderID, 10), false)
}

// PaymentOutcome asks payment what became of an order's charge; nil with
// no error when payment has no record of the order (404). Payment may ask
// the PSP to answer (a status query by key, which never charges), so this
// is the one question that can take up to the PSP's timeout.
func (c *Client) PaymentOutcome(ctx context.Context, orderID uint64) (*PaymentOutcome, Answer, error) {
	// Behind the admin token (payment's GET .../outcome may ask the PSP).
	return ask[PaymentOutcome](ctx, c, PaymentService, "/payments/"+strconv.FormatUint(orderID, 10)+"/outcome", true)
}

// ask GETs path from service svc (admin: with the admin token) and decodes
// the record it answers: nil, with no error, when svc has none (404). The
// error is set only when the answer is neither; the Answer is always
// filled in for the evidence.
func ask[T any](ctx context.Context, c *Client, svc, path string, admin bool) (*T, Answer, error) {
	var v T
	a, err := c.get(ctx, svc, path, admin, &v)
	if err != nil || !a.Found() {
		return nil, a, err
	}
	return &v, a, nil
}

// Outbox lists a service's outbox rows for one order.
func (c *Client) Outbox(ctx context.Context, service string, orderID uint64) ([]OutboxEvent, Answer, error) {
	var out struct {
		Events []OutboxEvent `json:"events"`
	}
	a, err := c.get(ctx, service, "/admin/outbox?aggregate_id="+strconv.FormatUint(orderID, 10), true, &out)
	if err == nil && !a.Found() {
		err = fmt.Errorf("%s %s: HTTP %d", service, a.Asked, a.HTTPStatus)
	}
	if err == nil {
		// Keep the status of each row as evidence, not the payloads.
		if b, merr := json.Marshal(out.Events); merr == nil {
			a.Body = b
		}
	}
	return out.Events, a, err
}

// maxInboxIDs is what /admin/inbox accepts per request.
const maxInboxIDs = 200

// Inbox lists a service's inbox rows for these event ids.
func (c *Client) Inbox(ctx context.Context, service string, eventIDs []string) ([]InboxRow, error) {
	var all []InboxRow
	for len(eventIDs) > 0 {
		n := min(len(eventIDs), maxInboxIDs)
		var out struct {
			Inbox []InboxRow `json:"inbox"`
		}
		a, err := c.get(ctx, service, "/admin/inbox?event_id="+url.QueryEscape(strings.Join(eventIDs[:n], ",")), true, &out)
		if err == nil && !a.Found() {
			err = fmt.Errorf("%s GET /admin/inbox: HTTP %d", service, a.HTTPStatus)
		}
		if err != nil {
			return all, err
		}
		all = append(all, out.Inbox...)
		eventIDs = eventIDs[n:]
	}
	return all, nil
}

// ErrNotRetried: the service had no failed event with that id (HTTP 409):
// it was retried or sent meanwhile.
var ErrNotRetried = errors.New("the event is not failed (any more)")

// RetryOutbox asks a service to put one of its failed outbox events back to
// pending with its original event_id (POST /admin/outbox/{event_id}/retry).
func (c *Client) RetryOutbox(ctx context.Context, service, eventID string) (Answer, error) {
	a, err := c.do(ctx, http.MethodPost, service, "/admin/outbox/"+url.PathEscape(eventID)+"/retry", true, nil)
	switch {
	case err != nil:
		return a, err
	case a.HTTPStatus == http.StatusConflict:
		return a, ErrNotRetried
	case a.HTTPStatus != http.StatusOK:
		return a, fmt.Errorf("%s %s: HTTP %d", service, a.Asked, a.HTTPStatus)
	}
	return a, nil
}

// maxBody bounds what is read from a peer.
const maxBody = 4 << 20

func (c *Client) get(ctx context.Context, service, path string, admin bool, out any) (Answer, error) {
	a, err := c.do(ctx, http.MethodGet, service, path, admin, out)
	if err == nil && !a.Answered() {
		err = fmt.Errorf("%s %s: HTTP %d", service, a.Asked, a.HTTPStatus)
	}
	return a, err
}

func (c *Client) do(ctx context.Context, method, service, path string, admin bool, out any) (Answer, error) {
	a := Answer{Asked: method + " " + path}
	peers, ok := c.urls[service]
	if !ok || peers.Current() == "" {
		err := fmt.Errorf("no URL for service %q", service)
		a.Error = err.Error()
		return a, err
	}
	resp, err := peers.Do(ctx, c.http, endpoints.Always, func(base string) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "application/json")
		if admin && c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		return req, nil
	})
	a.AnsweredAt = time.Now().UTC()
	if err != nil {
		a.Error = err.Error()
		return a, fmt.Errorf("%s %s: %w", service, a.Asked, err)
	}
	defer resp.Body.Close()
	a.HTTPStatus = resp.StatusCode
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		a.Error = err.Error()
		return a, fmt.Errorf("%s %s: read: %w", service, a.Asked, err)
	}
	if json.Valid(body) {
		a.Body = compact(body)
	}
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, out); err != nil {
			a.Error = err.Error()
			return a, fmt.Errorf("%s %s: decode: %w", service, a.Asked, err)
		}
	}
	return a, nil
}

func compact(b []byte) json.RawMessage {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return json.RawMessage(b)
	}
	return json.RawMessage(buf.Bytes())
}
