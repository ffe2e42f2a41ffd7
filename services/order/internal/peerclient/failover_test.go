package peerclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// instance is one inventory instance answering GET /reservations/{id}
// with its own name in the reason, so the test sees who answered.
func instance(t *testing.T, name string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/reservations/404" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(Reservation{OrderID: "7", Status: "reserved", Reason: name})
	}))
	t.Cleanup(s.Close)
	return s
}

// INVENTORY_URL lists two instances, the first one down: the client asks
// the second, keeps asking it (the last that worked), and takes a 404 from
// it as the answer rather than moving on.
func TestInventoryFailoverOrder(t *testing.T) {
	t.Parallel()
	first, second := instance(t, "inventory-1"), instance(t, "inventory-2")
	firstURL := first.URL
	first.Close()
	c := New(firstURL+","+second.URL, "http://127.0.0.1:1", "", 2*time.Second)
	ctx := context.Background()

	for i := range 2 {
		r, a, err := c.Reservation(ctx, 7)
		if err != nil || r == nil {
			t.Fatalf("call %d: reservation %v, answer %+v, error %v", i, r, a, err)
		}
		if r.Reason != "inventory-2" {
			t.Errorf("call %d answered by %q, want inventory-2 (the first is down)", i, r.Reason)
		}
	}
	r, a, err := c.Reservation(ctx, 404)
	if err != nil || r != nil || a.HTTPStatus != http.StatusNotFound {
		t.Errorf("unknown order: reservation %v, status %d, error %v; want the 404 as the answer", r, a.HTTPStatus, err)
	}
	// Payment's only address is down: a transport error, no answer.
	if _, a, err := c.Payment(ctx, 7); err == nil || a.HTTPStatus != 0 {
		t.Errorf("payment down: status %d, error %v; want no answer and an error", a.HTTPStatus, err)
	}
}
