package contract

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/web"
	"github.com/relmsg/ordersaga/pkg/base/wire"
)

// TestChecker: the middleware's rules, on a fake order service.
func TestChecker(t *testing.T) {
	order := wire.Order{OrderID: "7", Status: wire.OrderPendingInventory, RefundStatus: wire.RefundNone, CustomerID: "c-1",
		Items: []wire.OrderItem{{SKU: "SKU-1", Quantity: 2, UnitPriceCents: 8900}}, TotalCents: 17800, Currency: "EUR",
		CreatedAt: time.Now(), UpdatedAt: time.Now()}
	answer := func(status int, v any) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Location", "/orders/7")
			web.WriteJSON(w, status, v)
		}
	}
	problem := func(status int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { web.WriteProblem(w, r, web.Errorf(status, "no")) }
	}
	const create = `{"customer_id":"c-1","items":[{"sku":"SKU-1","quantity":2}]}`
	tests := []struct {
		name, method, path, body, key string
		handler                       http.Handler
		want                          string // "" = no violation
	}{
		{"a documented create", "POST", "/orders", create, "k-1", answer(202, order), ""},
		{"a refusal of a bad request", "POST", "/orders", `{"customer_id":"c-1","coupon":"x"}`, "k-1", problem(400), ""},
		{"an unknown path refused", "GET", "/orders/7/summary", "", "", problem(404), ""},
		{"a field the document lacks", "POST", "/orders", create, "k-1",
			answer(202, map[string]any{"order_id": "7", "status": "pending_inventory", "refund_status": "none", "customer_id": "c-1",
				"total_cents": 1, "currency": "EUR", "created_at": time.Now(), "updated_at": time.Now(), "channel": "web"}), "channel"},
		{"a request field accepted", "POST", "/orders", `{"customer_id":"c-1","items":[{"sku":"SKU-1","quantity":2}],"coupon":"x"}`, "k-1",
			answer(202, order), "coupon"},
		{"an undocumented endpoint", "GET", "/orders/7/summary", "", "", answer(200, order), "not an endpoint"},
		{"an undocumented status", "GET", "/orders/7", "", "", problem(418), "418"},
		{"an error that is not a problem document", "GET", "/nowhere", "", "", answer(404, map[string]string{"error": "x"}), "not a problem document"},
		{"the wrong service", "GET", "/stock", "", "", answer(200, wire.StockList{Stock: []wire.Stock{}}), "not an endpoint of order"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewChecker()
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(c.Middleware("order")(tt.handler))
			defer srv.Close()
			ct := ""
			if tt.body != "" {
				ct = "application/json"
			}
			testutil.Call(t, tt.method, srv.URL+tt.path, tt.body, "Content-Type", ct, "Idempotency-Key", tt.key)
			got := strings.Join(c.Violations(), "\n")
			switch {
			case tt.want == "" && got != "":
				t.Fatalf("violations:\n%s", got)
			case tt.want != "" && !strings.Contains(got, tt.want):
				t.Fatalf("violations %q, want one about %q", got, tt.want)
			}
		})
	}
}
