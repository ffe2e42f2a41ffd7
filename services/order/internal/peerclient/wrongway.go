package peerclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/relmsg/ordersaga/pkg/endpoints"
	"github.com/relmsg/ordersaga/pkg/events"
)

// ReserveNow is the wrong way sync-reserve's call (pkg/wrongway; demo mode
// only): it asks inventory to reserve an order's stock synchronously
// (POST /debug/reservations, the OrderCreated payload) and returns the
// reservation's status, or an error when no answer came within timeout.
// It is the only call here that changes anything.
func (c *Client) ReserveNow(ctx context.Context, p events.OrderCreatedV1, timeout time.Duration) (string, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The reservation is keyed by the order id, so a second instance asked
	// after a lost answer reserves nothing twice.
	resp, err := c.urls[InventoryService].Do(ctx, c.http, endpoints.Always, func(base string) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/debug/reservations", bytes.NewReader(body))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
			if c.token != "" { // /debug wants ADMIN_TOKEN when one is set
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
		}
		return req, err
	})
	if err != nil {
		return "", fmt.Errorf("inventory POST /debug/reservations: %w", err)
	}
	defer resp.Body.Close()
	var r Reservation
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("inventory POST /debug/reservations: HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return "", fmt.Errorf("inventory POST /debug/reservations: decode: %w", err)
	}
	return r.Status, nil
}
