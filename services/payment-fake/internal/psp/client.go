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
	var ch Charge
	if err := c.do(ctx, http.MethodPost, "/charges", req, &ch); err != nil {
		return Charge{}, fmt.Errorf("psp charge %s: %w", req.IdempotencyKey, err)
	}
	return ch, nil
}

// GetCharge returns the charge made with an idempotency key, or ErrNotFound.
func (c *Client) GetCharge(ctx context.Context, idempotencyKey string) (Charge, error) {
	var ch Charge
	if err := c.do(ctx, http.MethodGet, "/charges/"+url.PathEscape(idempotencyKey), nil, &ch); err != nil {
		return Charge{}, fmt.Errorf("psp get charge %s: %w", idempotencyKey, notFound(err))
	}
	return ch, nil
}

// Refund asks the PSP to refund (part of) a succeeded charge, once per
// req.IdempotencyKey. Errors: ErrOutcomeUnknown (query GetRefund), or
// *APIError (422 for a declined or unknown charge or too large an amount).
func (c *Client) Refund(ctx context.Context, req RefundRequest) (Refund, error) {
	var f Refund
	if err := c.do(ctx, http.MethodPost, "/refunds", req, &f); err != nil {
		return Refund{}, fmt.Errorf("psp refund %s: %w", req.IdempotencyKey, err)
	}
	return f, nil
}

// GetRefund returns the refund made with an idempotency key, or ErrNotFound.
func (c *Client) GetRefund(ctx context.Context, idempotencyKey string) (Refund, error) {
	var f Refund
	if err := c.do(ctx, http.MethodGet, "/refunds/"+url.PathEscape(idempotencyKey), nil, &f); err != nil {
		return Refund{}, fmt.Errorf("psp get refund %s: %w", idempotencyKey, notFound(err))
	}
	return f, nil
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

// notFound turns the 404 of a status query into ErrNotFound.
func notFound(err error) error {
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return fmt.Errorf("%w: %s", ErrNotFound, ae.Message)
	}
	return err
}
