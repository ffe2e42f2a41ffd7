package inventoryhttp_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/inbox/batch"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventoryapp"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorybindings"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventoryhttp"
)

var quiet = slog.New(slog.DiscardHandler)

type fixture struct {
	db  *sqldbtest.DB
	srv *httptest.Server
	c   *inbox.Consumer
}

func setup(t *testing.T) *fixture {
	t.Helper()
	db := sqldbtest.New(t, "inventory")
	app := inventoryapp.New(db.DB, quiet, inventoryapp.Config{Consumer: inventorybindings.ConsumerName})
	r := chi.NewRouter()
	inventoryhttp.Routes(r, app, quiet)
	// The service mounts these under /admin behind ADMIN_TOKEN
	// (service.Runtime.Router); the token is the runtime's concern.
	r.Route("/admin", inventoryhttp.AdminRoutes(app, quiet))
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	c, _ := batch.New(inbox.Config{Name: inventorybindings.ConsumerName, DB: db.DB, Log: quiet},
		inventorybindings.Handlers(app), batch.Options{})
	return &fixture{db: db, srv: srv, c: c}
}

// do sends a request and decodes the JSON answer into a generic value. A
// receipt gets an Idempotency-Key of its own unless the test sends one
// (doKey).
func (f *fixture) do(t *testing.T, method, path, contentType, body string) (int, map[string]any) {
	t.Helper()
	key := ""
	if strings.HasSuffix(path, "/receipts") {
		key = uuid.NewString()
	}
	status, v, _ := f.doKey(t, method, path, contentType, key, body)
	return status, v
}

func (f *fixture) doKey(t *testing.T, method, path, contentType, key, body string) (int, map[string]any, http.Header) {
	t.Helper()
	a := testutil.Call(t, method, f.srv.URL+path, body, "Content-Type", contentType, "Idempotency-Key", key)
	want := "application/json"
	if a.Status >= 400 {
		want = "application/problem+json"
	}
	if ct := a.Header.Get("Content-Type"); ct != want {
		t.Errorf("%s %s: Content-Type %q, want %s", method, path, ct, want)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(a.Body), &v); err != nil {
		t.Fatalf("%s %s: decode answer: %v", method, path, err)
	}
	return a.Status, v, a.Header
}

// notFound is the problem document of an unknown SKU at path.
func notFound(path, detail string) map[string]any {
	return map[string]any{"type": "https://github.com/relmsg/ordersaga/blob/main/docs/contract.md#problem-not-found",
		"title": "Not found", "status": float64(404), "detail": detail, "instance": path, "error": detail}
}

func stockObject(sku string, onHand, reserved float64) map[string]any {
	return map[string]any{"sku": sku, "on_hand": onHand, "reserved": reserved, "available": onHand - reserved}
}

func TestListStock(t *testing.T) {
	t.Parallel()
	f := setup(t)
	status, v := f.do(t, "GET", "/stock", "", "")
	if status != http.StatusOK {
		t.Fatalf("status %d, want 200: %v", status, v)
	}
	want := []any{
		stockObject("SKU-1", 100, 0), stockObject("SKU-2", 500, 0), stockObject("SKU-3", 20, 0),
		stockObject("SKU-4", 50, 0), stockObject("SKU-LIMITED", 1, 0), stockObject("SKU-SOLDOUT", 0, 0),
	}
	if !reflect.DeepEqual(v["stock"], want) {
		t.Errorf("stock = %v, want %v", v["stock"], want)
	}
}

func TestGetStock(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.reserve(t, 1, "SKU-3", 5)
	tests := []struct {
		path   string
		status int
		want   map[string]any
	}{
		{"/stock/SKU-3", 200, stockObject("SKU-3", 20, 5)},
		{"/stock/SKU-NOPE", 404, notFound("/stock/SKU-NOPE", "sku not found")},
		{"/stock/sku%20with%20spaces", 404, notFound("/stock/sku%20with%20spaces", "sku not found")},
		{"/stock/" + strings.Repeat("S", 65), 404, notFound("/stock/"+strings.Repeat("S", 65), "sku not found")},
		{"/stock/sku-1", 404, notFound("/stock/sku-1", "sku not found")}, // SKUs are case sensitive
	}
	for _, tt := range tests {
		status, v := f.do(t, "GET", tt.path, "", "")
		if status != tt.status || !reflect.DeepEqual(v, tt.want) {
			t.Errorf("GET %s = %d %v, want %d %v", tt.path, status, v, tt.status, tt.want)
		}
	}
}

// reserve processes an OrderCreated through the service's consumer.
func (f *fixture) reserve(t *testing.T, orderID uint64, sku string, qty int) {
	t.Helper()
	b, _ := json.Marshal(events.OrderCreatedV1{OrderID: orderID, CustomerID: "c-1", TotalCents: 100, Currency: "EUR",
		Items: []events.Item{{SKU: sku, Quantity: qty, UnitPriceCents: 10}}})
	e := events.Envelope{EventID: uuid.NewString(), Type: events.OrderCreated, AggregateID: orderID,
		AggregateVersion: 1, SchemaVersion: 1, Payload: b}
	if err := f.c.Process(context.Background(), e); err != nil {
		t.Fatal(err)
	}
}

func TestGetReservation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.reserve(t, 42, "SKU-1", 2)
	f.reserve(t, 43, "SKU-LIMITED", 2)

	status, v := f.do(t, "GET", "/reservations/42", "", "")
	if status != http.StatusOK {
		t.Fatalf("status %d, want 200: %v", status, v)
	}
	times := map[string]time.Time{}
	for _, k := range []string{"created_at", "updated_at", "expires_at"} {
		s, _ := v[k].(string)
		ts, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Errorf("%s = %v, want an RFC 3339 time", k, v[k])
		}
		times[k] = ts
		delete(v, k)
	}
	// The lease is the default RESERVATION_TTL from the reservation's
	// database time (the same statement's NOW(6)).
	if lease := times["expires_at"].Sub(times["created_at"]); lease != 15*time.Minute {
		t.Errorf("expires_at - created_at = %s, want the 15m lease", lease)
	}
	want := map[string]any{"order_id": "42", "status": "reserved", "reason": "", "expired_at": nil,
		"items": []any{map[string]any{"sku": "SKU-1", "quantity": float64(2)}}}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("reservation = %v, want %v", v, want)
	}

	status, v = f.do(t, "GET", "/reservations/43", "", "")
	if status != http.StatusOK || v["status"] != "rejected" || v["expires_at"] != nil ||
		v["reason"] != "insufficient stock for SKU-LIMITED: requested 2, available 1" || !reflect.DeepEqual(v["items"], []any{}) {
		t.Errorf("rejected reservation = %d %v", status, v)
	}

	for _, path := range []string{"/reservations/999", "/reservations/abc", "/reservations/0", "/reservations/-1",
		"/reservations/99999999999999999999999"} {
		status, v := f.do(t, "GET", path, "", "")
		if status != http.StatusNotFound || v["error"] != "reservation not found" {
			t.Errorf("GET %s = %d %v, want 404 reservation not found", path, status, v)
		}
	}
}

func TestReceipt(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.reserve(t, 1, "SKU-3", 5)
	status, v := f.do(t, "POST", "/stock/SKU-3/receipts", "application/json", `{"quantity":30}`)
	if want := stockObject("SKU-3", 50, 5); status != http.StatusOK || !reflect.DeepEqual(v, want) {
		t.Errorf("receipt = %d %v, want 200 %v", status, v, want)
	}
	status, v = f.do(t, "POST", "/stock/SKU-SOLDOUT/receipts", "application/json; charset=utf-8", `{"quantity":1000000}`)
	if want := stockObject("SKU-SOLDOUT", 1000000, 0); status != http.StatusOK || !reflect.DeepEqual(v, want) {
		t.Errorf("receipt = %d %v, want 200 %v", status, v, want)
	}
}

// Bad input is refused with a JSON error and writes nothing.
func TestReceiptBadInput(t *testing.T) {
	t.Parallel()
	f := setup(t)
	// On-hand ceiling: SKU-4 one receipt short of it.
	f.db.MustExec(`UPDATE stock SET on_hand = 999999999 WHERE sku = 'SKU-4'`)
	tests := []struct {
		name, path, contentType, body string
		status                        int
		error                         string // substring
	}{
		{"unknown sku", "/stock/SKU-NOPE/receipts", "application/json", `{"quantity":1}`, 404, "sku not found"},
		{"malformed sku", "/stock/a%20b/receipts", "application/json", `{"quantity":1}`, 404, "sku not found"},
		{"zero", "/stock/SKU-1/receipts", "application/json", `{"quantity":0}`, 422, "between 1 and 1000000"},
		{"missing quantity", "/stock/SKU-1/receipts", "application/json", `{}`, 422, "between 1 and 1000000"},
		{"negative", "/stock/SKU-1/receipts", "application/json", `{"quantity":-5}`, 422, "between 1 and 1000000"},
		{"too many", "/stock/SKU-1/receipts", "application/json", `{"quantity":1000001}`, 422, "between 1 and 1000000"},
		{"past the ceiling", "/stock/SKU-4/receipts", "application/json", `{"quantity":2}`, 422, "would pass"},
		{"fraction", "/stock/SKU-1/receipts", "application/json", `{"quantity":1.5}`, 400, "wrong type"},
		{"string", "/stock/SKU-1/receipts", "application/json", `{"quantity":"5"}`, 400, "wrong type"},
		{"unknown field", "/stock/SKU-1/receipts", "application/json", `{"quantity":5,"sku":"SKU-2"}`, 400, "unknown field"},
		{"malformed JSON", "/stock/SKU-1/receipts", "application/json", `{"quantity":`, 400, "malformed"},
		{"empty body", "/stock/SKU-1/receipts", "application/json", ``, 400, "empty body"},
		{"two objects", "/stock/SKU-1/receipts", "application/json", `{"quantity":1}{"quantity":1}`, 400, "single JSON object"},
		{"no content type", "/stock/SKU-1/receipts", "", `{"quantity":1}`, 415, "Content-Type"},
		{"form", "/stock/SKU-1/receipts", "application/x-www-form-urlencoded", `quantity=1`, 415, "Content-Type"},
		{"huge body", "/stock/SKU-1/receipts", "application/json", `{"quantity":1` + strings.Repeat(" ", 2000) + `}`, 413, "larger than"},
	}
	for _, tt := range tests {
		status, v := f.do(t, "POST", tt.path, tt.contentType, tt.body)
		msg, _ := v["error"].(string)
		if status != tt.status || !strings.Contains(msg, tt.error) {
			t.Errorf("%s: %d %v, want %d with an error mentioning %q", tt.name, status, v, tt.status, tt.error)
		}
	}
	var changed int
	if err := f.db.Get(&changed, `SELECT COUNT(*) FROM stock WHERE on_hand <> CASE sku
  WHEN 'SKU-1' THEN 100 WHEN 'SKU-2' THEN 500 WHEN 'SKU-3' THEN 20 WHEN 'SKU-4' THEN 999999999
  WHEN 'SKU-LIMITED' THEN 1 ELSE 0 END OR reserved <> 0`); err != nil {
		t.Fatal(err)
	}
	if changed != 0 {
		t.Errorf("%d stock rows changed by refused receipts, want 0", changed)
	}
}

func TestUnknownRoutes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	// The service's runtime router answers these with JSON; here only the
	// method matters: a receipt is a POST, stock is read-only otherwise.
	req, _ := http.NewRequest("DELETE", f.srv.URL+"/stock/SKU-1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("DELETE /stock/SKU-1 = %d, want 405", resp.StatusCode)
	}
}
