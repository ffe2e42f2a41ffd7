// Package psptest serves the fake PSP, reads its books and sets its fault
// switch over its HTTP API, for the tests of the packages around it: every
// charge of an order, every refund of a charge, the switch. The payment service
// never does any of this (it knows a charge or a refund by its idempotency
// key only, psp.Client), so these calls live here, apart from it. It
// speaks the PSP's wire types (pkg/base/wire) and does not import psp, so
// psp's own tests use it too.
package psptest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/wire"
)

// Serve serves h, a PSP's handler (psp.Server.Handler, or something
// around it), the way the PSP process does, under /psp with the prefix
// stripped, until the test ends (before a database made earlier in the
// test is dropped), and returns its base URL.
func Serve(t testing.TB, h http.Handler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/psp/", http.StripPrefix("/psp", h))
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts.URL + "/psp"
}

// Books is the PSP at one base URL (e.g. http://127.0.0.1:8084/psp).
type Books struct{ base string }

// New returns the books of the PSP at baseURL.
func New(baseURL string) Books { return Books{base: baseURL} }

// Charges returns every charge the PSP holds for an order, oldest first.
func (b Books) Charges(ctx context.Context, orderRef string) ([]wire.Charge, error) {
	var out wire.ChargeList
	if err := b.do(ctx, http.MethodGet, "/charges?order_ref="+url.QueryEscape(orderRef), nil, &out); err != nil {
		return nil, fmt.Errorf("psp charges for order %s: %w", orderRef, err)
	}
	return out.Charges, nil
}

// Refunds returns every refund of a charge, oldest first.
func (b Books) Refunds(ctx context.Context, chargeID string) ([]wire.PSPRefund, error) {
	var out wire.PSPRefundList
	if err := b.do(ctx, http.MethodGet, "/refunds?charge_id="+url.QueryEscape(chargeID), nil, &out); err != nil {
		return nil, fmt.Errorf("psp refunds for charge %s: %w", chargeID, err)
	}
	return out.Refunds, nil
}

// Switch returns the PSP's fault switch (GET /switches).
func (b Books) Switch(ctx context.Context) (wire.Switch, error) {
	var sw wire.Switch
	if err := b.do(ctx, http.MethodGet, "/switches", nil, &sw); err != nil {
		return wire.Switch{}, fmt.Errorf("psp get switch: %w", err)
	}
	return sw, nil
}

// SetSwitch sets the PSP's fault switch (PUT /switches; the PSP takes it
// in demo mode only).
func (b Books) SetSwitch(ctx context.Context, sw wire.Switch) error {
	if err := b.do(ctx, http.MethodPut, "/switches", sw, nil); err != nil {
		return fmt.Errorf("psp set switch: %w", err)
	}
	return nil
}

// do sends one request with in as its JSON body (nil: none) and decodes a
// 2xx answer into out (nil: ignored); any other answer is an error.
func (b Books) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("answered %d: %s", resp.StatusCode, data)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}
