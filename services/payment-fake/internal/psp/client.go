package psp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/endpoints"
)

// ErrOutcomeUnknown marks a call whose outcome the caller cannot know: a
// timeout, a dropped connection, an unreadable answer or any 5xx. The charge
// or refund may or may not have happened. Never read it as a decline: query
// the status with the same idempotency key (GetCharge, GetRefund) before
// retrying or giving up.
var ErrOutcomeUnknown = errors.New("outcome unknown (query the status with the same idempotency key)")

// ErrNotFound is returned by GetCharge and GetRefund when the PSP has no
// record with that idempotency key.
var ErrNotFound = errors.New("not found")

// APIError is a 4xx answer: the PSP understood the call and refused it
// (invalid input, key reused with other parameters, refund not allowed).
// Nothing was charged or refunded by this call; sending it again unchanged
// gets the same answer.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("psp answered %d: %s", e.Status, e.Message) }

// Client calls a PSP over HTTP.
//
// It sends the idempotency key in the body only, never as an
// "Idempotency-Key" header: with that header net/http's Transport treats a
// POST as replayable and may silently resend it on a broken keep-alive
// connection, hiding from the caller exactly the lost answer this PSP lets
// the course demonstrate.
//
// With several addresses (PSP_URL with commas: the PSP behind more than one
// address) a call moves on to the next only when the connection could not
// be made (endpoints.NotSent): a call that reached an address and lost its
// answer stays ErrOutcomeUnknown, to be resolved by a status query, never
// silently sent again elsewhere.
type Client struct {
	addrs *endpoints.List
	hc    *http.Client
	token string // PSP_TOKEN, sent with every call when set
}

// NewClient returns a client for the PSP at baseURL (e.g.
// http://127.0.0.1:8084/psp), or at each address of a comma-separated list
// (endpoints.Parse; bad entries are left out). httpClient sets the
// timeout; nil means a client with a 10 s timeout.
func NewClient(baseURL string, httpClient *http.Client) *Client {
	if httpClient == nil {
		httpClient = &http.Client{Timeout: 10 * time.Second}
	}
	addrs, _ := endpoints.Parse(baseURL)
	return &Client{addrs: addrs, hc: httpClient}
}

// WithToken makes c send the PSP's key (PSP_TOKEN) with every call, as a
// merchant sends its secret key to a real provider; it returns c.
func (c *Client) WithToken(token string) *Client {
	c.token = token
	return c
}

// Charge asks the PSP to charge, once per req.IdempotencyKey. A declined
// charge is not an error: it comes back with Status "declined" and a
// DeclineCode. Errors: ErrOutcomeUnknown (query GetCharge), or *APIError.
func (c *Client) Charge(ctx context.Context, req ChargeRequest) (Charge, error) {
	return call[Charge](ctx, c, http.MethodPost, "/charges", req, "charge", req.IdempotencyKey)
}

// GetCharge returns the charge made with an idempotency key, or ErrNotFound.
func (c *Client) GetCharge(ctx context.Context, idempotencyKey string) (Charge, error) {
	return get[Charge](ctx, c, "/charges/", "get charge", idempotencyKey)
}

// Refund asks the PSP to refund (part of) a succeeded charge, once per
// req.IdempotencyKey. Errors: ErrOutcomeUnknown (query GetRefund), or
// *APIError (422 for a declined or unknown charge or too large an amount).
func (c *Client) Refund(ctx context.Context, req RefundRequest) (Refund, error) {
	return call[Refund](ctx, c, http.MethodPost, "/refunds", req, "refund", req.IdempotencyKey)
}

// GetRefund returns the refund made with an idempotency key, or ErrNotFound.
func (c *Client) GetRefund(ctx context.Context, idempotencyKey string) (Refund, error) {
	return get[Refund](ctx, c, "/refunds/", "get refund", idempotencyKey)
}

// call makes one call (c.do) and decodes its answer as a T; an error is
// wrapped with what and the idempotency key.
func call[T any](ctx context.Context, c *Client, method, path string, in any, what, key string) (T, error) {
	var v T
	if err := c.do(ctx, method, path, in, &v); err != nil {
		var zero T
		return zero, fmt.Errorf("psp %s %s: %w", what, key, err)
	}
	return v, nil
}

// get is the status query of the record made with key under collection
// ("/charges/"): no such record is ErrNotFound.
func get[T any](ctx context.Context, c *Client, collection, what, key string) (T, error) {
	v, err := call[T](ctx, c, http.MethodGet, collection+url.PathEscape(key), nil, what, key)
	return v, notFound(err)
}

// do sends one request and sorts the result into the classes callers act on:
// nil (2xx, decoded into out), *APIError (4xx: refused, nothing done) or
// ErrOutcomeUnknown (no complete answer, or 5xx: anything may have happened).
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var b []byte
	if in != nil {
		var err error
		if b, err = json.Marshal(in); err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
	}
	resp, err := c.addrs.Do(ctx, c.hc, endpoints.NotSent, func(base string) (*http.Request, error) {
		var body io.Reader
		if in != nil {
			body = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, body)
		if err != nil {
			return nil, err
		}
		if in != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Accept", "application/json")
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		return req, nil
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%w: read answer (status %d): %w", ErrOutcomeUnknown, resp.StatusCode, err)
	}
	switch {
	case resp.StatusCode >= 500:
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, apiError(resp.StatusCode, data))
	case resp.StatusCode >= 300:
		return apiError(resp.StatusCode, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%w: decode answer (status %d): %w", ErrOutcomeUnknown, resp.StatusCode, err)
	}
	return nil
}

// apiError reads a refusal: a problem document's detail (or, from a PSP
// of before the problem documents, its "error").
func apiError(status int, body []byte) *APIError {
	var e struct {
		Detail string `json:"detail"`
		Error  string `json:"error"`
	}
	err := json.Unmarshal(body, &e)
	if e.Detail != "" {
		e.Error = e.Detail
	}
	if err != nil || e.Error == "" {
		e.Error = strings.TrimSpace(string(body))
		if len(e.Error) > 200 {
			e.Error = e.Error[:200]
		}
	}
	return &APIError{Status: status, Message: e.Error}
}

// notFound turns the 404 of a status query into ErrNotFound (still
// wrapping the PSP's answer).
func notFound(err error) error {
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}
