package orderhttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/services/order/internal/orderapp"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
	"github.com/relmsg/ordersaga/services/order/internal/orderhttp"
)

func server(t *testing.T) (*httptest.Server, *sqldbtest.DB) {
	t.Helper()
	db := sqldbtest.New(t, "order")
	srv := httptest.NewServer(router(db))
	t.Cleanup(srv.Close)
	return srv, db
}

// router is the order API over db, its logs discarded.
func router(db *sqldbtest.DB) *chi.Mux {
	log := slog.New(slog.DiscardHandler)
	r := chi.NewRouter()
	orderhttp.Routes(r, orderapp.New(db.DB, func() {}, log, orderapp.Config{}), log)
	return r
}

func do(t *testing.T, method, url, contentType, key, body string) (int, map[string]any, http.Header) {
	t.Helper()
	a := testutil.Call(t, method, url, body, "Content-Type", contentType, "Idempotency-Key", key)
	var out map[string]any
	_ = json.Unmarshal([]byte(a.Body), &out)
	return a.Status, out, a.Header
}

const good = `{"customer_id":"c-1","items":[{"sku":"SKU-1","quantity":2}]}`

func TestCreateAndGet(t *testing.T) {
	t.Parallel()
	srv, _ := server(t)
	code, body, hdr := do(t, "POST", srv.URL+"/orders", "application/json", "k-1", good)
	if code != http.StatusAccepted || body["status"] != "pending_inventory" || body["total_cents"] != float64(17800) {
		t.Fatalf("create: %d %v, want 202 pending_inventory 17800", code, body)
	}
	id := body["order_id"].(string)
	if hdr.Get("Location") != "/orders/"+id || hdr.Get("Idempotent-Replayed") != "" {
		t.Fatalf("headers: %v", hdr)
	}
	code, again, hdr := do(t, "POST", srv.URL+"/orders", "application/json", "k-1", good)
	if code != http.StatusAccepted || again["order_id"] != id || hdr.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %v %v", code, again, hdr)
	}
	code, got, _ := do(t, "GET", srv.URL+"/orders/"+id, "", "", "")
	if code != http.StatusOK || got["order_id"] != id || got["status"] != "pending_inventory" {
		t.Fatalf("get: %d %v", code, got)
	}
	// The POST answers the times the order is stored with, to the
	// microsecond: the create, its replay and the GET agree.
	for _, field := range []string{"created_at", "updated_at", "deadline_at"} {
		if body[field] == nil || body[field] != got[field] || again[field] != got[field] {
			t.Errorf("%s: create %v, replay %v, get %v: want one stored time", field, body[field], again[field], got[field])
		}
	}
	if body["created_at"] != body["updated_at"] {
		t.Errorf("created_at %v, updated_at %v: a new order was never updated", body["created_at"], body["updated_at"])
	}
	code, list, _ := do(t, "GET", srv.URL+"/orders?status=pending_inventory", "", "", "")
	if code != http.StatusOK || len(list["orders"].([]any)) != 1 {
		t.Fatalf("list: %d %v", code, list)
	}
	code, list, _ = do(t, "GET", srv.URL+"/orders?status=confirmed", "", "", "")
	if code != http.StatusOK || len(list["orders"].([]any)) != 0 {
		t.Fatalf("list confirmed: %d %v", code, list)
	}
}

// Bad input gets a JSON error with the fitting status and writes nothing.
func TestBadInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	srv, db := server(t)
	huge := `{"customer_id":"c-1","items":[` + strings.Repeat(`{"sku":"SKU-1","quantity":1},`, 5000) + `{"sku":"SKU-2","quantity":1}]}`
	tests := []struct {
		name, ct, key, body string
		want                int
		msg                 string
	}{
		{"missing key", "application/json", "", good, 400, "Idempotency-Key"},
		{"oversized key", "application/json", strings.Repeat("k", 129), good, 400, "longer than"},
		{"key with spaces", "application/json", "a key", good, 400, "printable"},
		{"wrong content type", "text/plain", "k", good, 415, "Content-Type"},
		{"no content type", "", "k", good, 415, "Content-Type"},
		{"malformed JSON", "application/json", "k", `{"customer_id":`, 400, "malformed"},
		{"unknown field", "application/json", "k", `{"customer_id":"c-1","items":[{"sku":"SKU-1","quantity":1}],"coupon":"x"}`, 400, "unknown field"},
		{"wrong type", "application/json", "k", `{"customer_id":"c-1","items":[{"sku":"SKU-1","quantity":"2"}]}`, 400, "wrong type"},
		{"two objects", "application/json", "k", good + good, 400, "single JSON object"},
		{"a key twice (the last would win)", "application/json", "k", `{"customer_id":"a","customer_id":"b","items":[{"sku":"SKU-1","quantity":1}]}`, 400, "appears twice"},
		{"keys differing only in case", "application/json", "k", `{"customer_id":"a","Customer_ID":"b","items":[{"sku":"SKU-1","quantity":1}]}`, 400, "differ only in case"},
		{"a key matching only by case", "application/json", "k", `{"CUSTOMER_ID":"a","items":[{"sku":"SKU-1","quantity":1}]}`, 400, "case-sensitive"},
		{"a nested key twice", "application/json", "k", `{"customer_id":"a","items":[{"sku":"SKU-1","quantity":1,"quantity":9}]}`, 400, "appears twice"},
		{"trailing garbage", "application/json", "k", good + ` x`, 400, "single JSON object"},
		{"a control character", "application/json", "k", `{"customer_id":"c\u0007","items":[{"sku":"SKU-1","quantity":1}]}`, 400, "control character"},
		{"invalid UTF-8", "application/json", "k", "{\"customer_id\":\"c\xff\",\"items\":[{\"sku\":\"SKU-1\",\"quantity\":1}]}", 400, "UTF-8"},
		{"an overflowing quantity", "application/json", "k", `{"customer_id":"c-1","items":[{"sku":"SKU-1","quantity":1e400}]}`, 400, "wrong type"},
		{"a key list", "application/json", "k1,k2", good, 400, "one Idempotency-Key"},
		{"a quoted key list", "application/json", `"k1", "k2"`, good, 400, "one Idempotency-Key"},
		{"an empty quoted key", "application/json", `""`, good, 400, "empty"},
		{"empty items", "application/json", "k", `{"customer_id":"c-1","items":[]}`, 422, "must not be empty"},
		{"zero quantity", "application/json", "k", `{"customer_id":"c-1","items":[{"sku":"SKU-1","quantity":0}]}`, 422, "quantity"},
		{"negative quantity", "application/json", "k", `{"customer_id":"c-1","items":[{"sku":"SKU-1","quantity":-3}]}`, 422, "quantity"},
		{"absurd quantity", "application/json", "k", `{"customer_id":"c-1","items":[{"sku":"SKU-1","quantity":1000000}]}`, 422, "quantity"},
		{"unknown sku", "application/json", "k", `{"customer_id":"c-1","items":[{"sku":"NOPE","quantity":1}]}`, 422, "unknown sku"},
		{"duplicate sku", "application/json", "k", `{"customer_id":"c-1","items":[{"sku":"SKU-1","quantity":1},{"sku":"SKU-1","quantity":1}]}`, 422, "twice"},
		{"missing customer", "application/json", "k", `{"items":[{"sku":"SKU-1","quantity":1}]}`, 422, "customer_id"},
		{"oversized body", "application/json", "k", huge, 413, "larger than"},
	}
	for _, tt := range tests {
		code, body, _ := do(t, "POST", srv.URL+"/orders", tt.ct, tt.key, tt.body)
		msg, _ := body["detail"].(string)
		if code != tt.want || !strings.Contains(msg, tt.msg) || body["type"] == nil || body["title"] == nil || body["instance"] != "/orders" {
			t.Errorf("%s: %d %v, want a %d problem document whose detail mentions %q", tt.name, code, body, tt.want, tt.msg)
		}
	}
	// Two Idempotency-Key header lines are two keys.
	req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(good))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Add("Idempotency-Key", "k1")
	req.Header.Add("Idempotency-Key", "k2")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("two Idempotency-Key lines: %v %v, want 400", resp, err)
	} else {
		resp.Body.Close()
	}
	var orders, events int
	db.Get(&orders, "SELECT COUNT(*) FROM orders")
	db.Get(&events, "SELECT COUNT(*) FROM outbox_events")
	if orders != 0 || events != 0 {
		t.Fatalf("orders=%d outbox=%d after bad requests, want 0 and 0", orders, events)
	}
	// Reusing a key for another body is refused too.
	if code, _, _ := do(t, "POST", srv.URL+"/orders", "application/json", "k2", good); code != 202 {
		t.Fatal(code)
	}
	other := `{"customer_id":"c-1","items":[{"sku":"SKU-1","quantity":3}]}`
	if code, body, _ := do(t, "POST", srv.URL+"/orders", "application/json", "k2", other); code != 422 || !strings.Contains(body["error"].(string), "idempotency key") ||
		!strings.HasSuffix(body["type"].(string), "#problem-idempotency-key-reused") {
		t.Fatalf("key reuse: %d %v, want 422 idempotency-key-reused", code, body)
	}
}

// A read of an order that does not exist, or with a bad query, gets a JSON
// error.
func TestBadReadsAreRefused(t *testing.T) {
	t.Parallel()
	srv, _ := server(t)
	for _, path := range []string{"/orders/999", "/orders/abc", "/orders/0"} {
		if code, body, _ := do(t, "GET", srv.URL+path, "", "", ""); code != 404 || body["error"] == nil {
			t.Errorf("GET %s: %d %v, want 404 JSON", path, code, body)
		}
	}
	for _, q := range []string{"?status=lost", "?limit=0", "?limit=501", "?before=x"} {
		if code, body, _ := do(t, "GET", srv.URL+"/orders"+q, "", "", ""); code != 400 || body["error"] == nil {
			t.Errorf("GET /orders%s: %d %v, want 400 JSON", q, code, body)
		}
	}
}

// The cancel's Idempotency-Key is honoured: the same key with the same
// request answers what the first request answered (marked replayed), and
// the same key with another order or another body is refused (422) and
// changes nothing.
func TestCancelHonoursItsIdempotencyKey(t *testing.T) {
	t.Parallel()
	srv, db := server(t)
	_, a, _ := do(t, "POST", srv.URL+"/orders", "application/json", "order-a", good)
	_, b, _ := do(t, "POST", srv.URL+"/orders", "application/json", "order-b", good)
	cancelA, cancelB := srv.URL+"/orders/"+a["order_id"].(string)+"/cancel", srv.URL+"/orders/"+b["order_id"].(string)+"/cancel"

	code, first, hdr := do(t, "POST", cancelA, "application/json", "cancel-1", `{"reason":"changed my mind"}`)
	if code != http.StatusAccepted || first["result"] != "cancelled" || hdr.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first cancel: %d %v %v, want 202 cancelled", code, first, hdr)
	}
	code, again, hdr := do(t, "POST", cancelA, "application/json", "cancel-1", `{"reason":"changed my mind"}`)
	if code != http.StatusAccepted || again["result"] != "cancelled" || hdr.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replayed cancel: %d %v %v, want the first answer again (202 cancelled, Idempotent-Replayed: true)", code, again, hdr)
	}
	// A new key on the cancelled order is a new request: nothing to do.
	if code, other, _ := do(t, "POST", cancelA, "application/json", "cancel-2", ""); code != http.StatusOK || other["result"] != "already_cancelled" {
		t.Fatalf("cancel with a new key: %d %v, want 200 already_cancelled", code, other)
	}
	for _, tt := range []struct{ name, url, body string }{
		{"another order", cancelB, `{"reason":"changed my mind"}`},
		{"another reason", cancelA, `{"reason":"too slow"}`},
		{"no body (the default reason)", cancelA, ""},
	} {
		code, body, _ := do(t, "POST", tt.url, "application/json", "cancel-1", tt.body)
		if msg, _ := body["error"].(string); code != http.StatusUnprocessableEntity || !strings.Contains(msg, "idempotency key") {
			t.Errorf("the key reused for %s: %d %v, want 422", tt.name, code, body)
		}
	}
	var statusB string
	if err := db.Get(&statusB, "SELECT status FROM orders WHERE id = ?", b["order_id"]); err != nil {
		t.Fatal(err)
	}
	var cancels int
	if err := db.Get(&cancels, "SELECT COUNT(*) FROM outbox_events WHERE event_type = 'order.cancelled'"); err != nil {
		t.Fatal(err)
	}
	if statusB != "pending_inventory" || cancels != 1 {
		t.Fatalf("order B is %s and %d order.cancelled events were written, want B untouched and one event", statusB, cancels)
	}
}

// The draft's quoted form of the key (a structured-field string) names the
// same key as the bare form: either one replays the other.
func TestQuotedIdempotencyKey(t *testing.T) {
	t.Parallel()
	srv, db := server(t)
	code, first, hdr := do(t, "POST", srv.URL+"/orders", "application/json", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, good)
	if code != http.StatusAccepted || hdr.Get("Idempotent-Replayed") != "" {
		t.Fatalf("quoted key: %d %v, want 202", code, first)
	}
	code, again, hdr := do(t, "POST", srv.URL+"/orders", "application/json", "8e03978e-40d5-43e8-bc93-6894a57f9324", good)
	if code != http.StatusAccepted || again["order_id"] != first["order_id"] || hdr.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the same key bare: %d %v %v, want the first order replayed", code, again, hdr)
	}
	var stored string
	if err := db.Get(&stored, "SELECT idempotency_key FROM orders"); err != nil || stored != "8e03978e-40d5-43e8-bc93-6894a57f9324" {
		t.Errorf("stored key %q (%v), want it without its quotes", stored, err)
	}
}

// A second request with a key whose first request is still being
// processed gets 409 at once (the draft's "in flight"), and writes
// nothing; once the first is answered the key replays it.
func TestKeyInFlightIs409(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	fps := failpoint.NewRegistry()
	srv := httptest.NewUnstartedServer(router(db))
	srv.Config.BaseContext = func(net.Listener) context.Context { return failpoint.WithRegistry(context.Background(), fps) }
	srv.Start()
	t.Cleanup(srv.Close)
	gate := fps.Pause("order.create.after-order-insert", 1)
	type result struct {
		code int
		body map[string]any
		hdr  http.Header
	}
	firstc := make(chan result, 1)
	go func() {
		code, body, hdr := do(t, "POST", srv.URL+"/orders", "application/json", "busy-1", good)
		firstc <- result{code, body, hdr}
	}()
	<-gate.Reached() // the first create holds its order row, uncommitted
	code, body, _ := do(t, "POST", srv.URL+"/orders", "application/json", `"busy-1"`, good)
	if code != http.StatusConflict || !strings.HasSuffix(fmt.Sprint(body["type"]), "#problem-idempotency-key-in-flight") {
		t.Errorf("second request while the first is in flight: %d %v, want 409 idempotency-key-in-flight", code, body)
	}
	// Cancel keys are a space of their own (an unknown order: 404, not 409).
	if code, body, _ := do(t, "POST", srv.URL+"/orders/999/cancel", "application/json", "busy-1", ""); code != http.StatusNotFound {
		t.Errorf("a cancel with the same key: %d %v, want 404 (its own key space)", code, body)
	}
	gate.Release()
	first := <-firstc
	if first.code != http.StatusAccepted {
		t.Fatalf("first create: %d %v", first.code, first.body)
	}
	code, again, hdr := do(t, "POST", srv.URL+"/orders", "application/json", "busy-1", good)
	if code != http.StatusAccepted || again["order_id"] != first.body["order_id"] || hdr.Get("Idempotent-Replayed") != "true" {
		t.Errorf("after the first was answered: %d %v, want its replay", code, again)
	}
	var orders int
	if err := db.Get(&orders, "SELECT COUNT(*) FROM orders"); err != nil || orders != 1 {
		t.Errorf("%d orders (%v), want 1", orders, err)
	}
}

// The cancel reason is text: no control characters, at most 200
// characters (counted as characters, not bytes); a refused cancel changes
// nothing.
func TestCancelReasonIsChecked(t *testing.T) {
	t.Parallel()
	srv, db := server(t)
	_, o, _ := do(t, "POST", srv.URL+"/orders", "application/json", "order-r", good)
	cancel := srv.URL + "/orders/" + o["order_id"].(string) + "/cancel"
	for _, tt := range []struct {
		name, body string
		want       int
	}{
		{"a control character", `{"reason":"bad\u001b[31m"}`, 400},
		{"a newline", `{"reason":"a\nb"}`, 400},
		{"201 characters", `{"reason":"` + strings.Repeat("x", 201) + `"}`, 422},
		{"a reason twice", `{"reason":"a","reason":"b"}`, 400},
		{"invalid UTF-8", "{\"reason\":\"\xc3\"}", 400},
	} {
		if code, body, _ := do(t, "POST", cancel, "application/json", "c-"+strings.ReplaceAll(tt.name, " ", "-"), tt.body); code != tt.want {
			t.Errorf("%s: %d %v, want %d", tt.name, code, body, tt.want)
		}
	}
	var cancels int
	if err := db.Get(&cancels, "SELECT COUNT(*) FROM cancel_requests"); err != nil || cancels != 0 {
		t.Fatalf("%d cancel requests recorded (%v) by refused cancels, want 0", cancels, err)
	}
	// 200 characters of two bytes each are 200 characters.
	if code, body, _ := do(t, "POST", cancel, "application/json", "c-ok", `{"reason":"`+strings.Repeat("é", 200)+`"}`); code != http.StatusAccepted {
		t.Errorf("200 two-byte characters: %d %v, want 202", code, body)
	}
}

// Keys are kept IDEMPOTENCY_KEY_RETENTION, then forgotten by the retention
// job (orderdb.ForgetCreateKeys, DeleteCancelKeys): a create's key again is
// a new order, a cancel's key again a new cancel. Younger keys stay.
func TestKeysAreForgottenAfterTheirRetention(t *testing.T) {
	t.Parallel()
	srv, db := server(t)
	ctx := context.Background()
	_, old, _ := do(t, "POST", srv.URL+"/orders", "application/json", "old-key", good)
	_, young, _ := do(t, "POST", srv.URL+"/orders", "application/json", "young-key", good)
	do(t, "POST", srv.URL+"/orders/"+old["order_id"].(string)+"/cancel", "application/json", "old-cancel", "")
	db.MustExec(`UPDATE orders SET created_at = created_at - INTERVAL 25 HOUR WHERE id = ?`, old["order_id"])
	db.MustExec(`UPDATE cancel_requests SET created_at = created_at - INTERVAL 25 HOUR`)
	if n, err := orderdb.ForgetCreateKeys(ctx, db.DB, 24*time.Hour, 100); err != nil || n != 1 {
		t.Fatalf("ForgetCreateKeys = %d, %v; want the one old key", n, err)
	}
	if n, err := orderdb.DeleteCancelKeys(ctx, db.DB, 24*time.Hour, 100); err != nil || n != 1 {
		t.Fatalf("DeleteCancelKeys = %d, %v; want the one old key", n, err)
	}
	code, again, hdr := do(t, "POST", srv.URL+"/orders", "application/json", "old-key", good)
	if code != http.StatusAccepted || again["order_id"] == old["order_id"] || hdr.Get("Idempotent-Replayed") != "" {
		t.Errorf("a forgotten key again: %d %v %v, want a new order", code, again, hdr)
	}
	code, same, hdr := do(t, "POST", srv.URL+"/orders", "application/json", "young-key", good)
	if code != http.StatusAccepted || same["order_id"] != young["order_id"] || hdr.Get("Idempotent-Replayed") != "true" {
		t.Errorf("a kept key again: %d %v, want the replay", code, same)
	}
	code, c, hdr := do(t, "POST", srv.URL+"/orders/"+old["order_id"].(string)+"/cancel", "application/json", "old-cancel", "")
	if code != http.StatusOK || c["result"] != "already_cancelled" || hdr.Get("Idempotent-Replayed") != "" {
		t.Errorf("a forgotten cancel key again: %d %v, want a new cancel (already_cancelled)", code, c)
	}
}
