package inventoryhttp_test

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorydb"
)

// A goods receipt is booked once per Idempotency-Key: the same key and
// request replay it (nothing added), the same key with another request is
// 422, no key is 400, and the quoted form of the key is the same key.
func TestReceiptIdempotencyKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const path = "/stock/SKU-3/receipts"
	status, v, hdr := f.doKey(t, "POST", path, "application/json", `"r-1"`, `{"quantity":30}`)
	if want := stockObject("SKU-3", 50, 0); status != http.StatusOK || hdr.Get("Idempotent-Replayed") != "" || !reflect.DeepEqual(v, want) {
		t.Fatalf("first receipt: %d %v, want 200 %v", status, v, want)
	}
	status, v, hdr = f.doKey(t, "POST", path, "application/json", "r-1", `{"quantity":30}`)
	if want := stockObject("SKU-3", 50, 0); status != http.StatusOK || hdr.Get("Idempotent-Replayed") != "true" || !reflect.DeepEqual(v, want) {
		t.Errorf("the same receipt again: %d %v %v, want 200 replayed with the stock unchanged", status, v, hdr)
	}
	for _, tt := range []struct {
		name, path, key, body string
		status                int
		typ                   string
	}{
		{"another quantity", path, "r-1", `{"quantity":31}`, 422, "idempotency-key-reused"},
		{"another SKU", "/stock/SKU-2/receipts", "r-1", `{"quantity":30}`, 422, "idempotency-key-reused"},
		{"no key", path, "", `{"quantity":1}`, 400, "idempotency-key-missing"},
		{"a key list", path, "a,b", `{"quantity":1}`, 400, "idempotency-key-invalid"},
		{"a key with a space", path, "a b", `{"quantity":1}`, 400, "idempotency-key-invalid"},
	} {
		status, v, _ := f.doKey(t, "POST", tt.path, "application/json", tt.key, tt.body)
		if status != tt.status || !strings.HasSuffix(v["type"].(string), "#problem-"+tt.typ) {
			t.Errorf("%s: %d %v, want %d %s", tt.name, status, v, tt.status, tt.typ)
		}
	}
	var receipts, onHand int
	if err := f.db.Get(&receipts, `SELECT COUNT(*) FROM stock_receipts`); err != nil {
		t.Fatal(err)
	}
	if err := f.db.Get(&onHand, `SELECT on_hand FROM stock WHERE sku = 'SKU-3'`); err != nil {
		t.Fatal(err)
	}
	if receipts != 1 || onHand != 50 {
		t.Errorf("%d receipt keys, SKU-3 on hand %d; want 1 and 50", receipts, onHand)
	}
}

// lockWait bounds the wait for the first receipt to block on the row: a
// bound, not a timing the test depends on.
const lockWait = 10 * time.Second

// While a receipt's first request waits in its transaction (here on a
// stock row another transaction holds), a second one with its key gets 409
// at once; the first then completes, and only it adds stock.
func TestReceiptKeyInFlightIs409(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	lock, err := f.db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()
	if _, err := lock.ExecContext(ctx, `SELECT on_hand FROM stock WHERE sku = 'SKU-2' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	firstc := make(chan int, 1)
	go func() {
		status, _, _ := f.doKey(t, "POST", "/stock/SKU-2/receipts", "application/json", "busy-r", `{"quantity":5}`)
		firstc <- status
	}()
	// The first request is in flight once its UPDATE waits for the lock.
	testutil.WaitFor(t, lockWait, "the first receipt to wait for the stock row", func() bool {
		var waiting int
		_ = f.db.Get(&waiting, `SELECT COUNT(*) FROM information_schema.processlist
WHERE db = DATABASE() AND info LIKE 'UPDATE stock SET on_hand%'`)
		return waiting == 1
	})
	status, v, _ := f.doKey(t, "POST", "/stock/SKU-2/receipts", "application/json", "busy-r", `{"quantity":5}`)
	if status != http.StatusConflict || !strings.HasSuffix(v["type"].(string), "#problem-idempotency-key-in-flight") {
		t.Errorf("second request in flight: %d %v, want 409 idempotency-key-in-flight", status, v)
	}
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	if status := <-firstc; status != http.StatusOK {
		t.Fatalf("first receipt: %d, want 200", status)
	}
	var onHand int
	if err := f.db.Get(&onHand, `SELECT on_hand FROM stock WHERE sku = 'SKU-2'`); err != nil || onHand != 505 {
		t.Errorf("SKU-2 on hand %d (%v), want 505: the receipt booked once", onHand, err)
	}
}

// Receipt keys are deleted once older than IDEMPOTENCY_KEY_RETENTION
// (inventorydb.DeleteReceiptKeys, run by the retention job): the key then
// books a new receipt.
func TestReceiptKeysAreForgottenAfterTheirRetention(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.doKey(t, "POST", "/stock/SKU-1/receipts", "application/json", "old-r", `{"quantity":1}`)
	f.doKey(t, "POST", "/stock/SKU-1/receipts", "application/json", "young-r", `{"quantity":1}`)
	f.db.MustExec(`UPDATE stock_receipts SET created_at = created_at - INTERVAL 25 HOUR WHERE idempotency_key = 'old-r'`)
	if n, err := inventorydb.DeleteReceiptKeys(context.Background(), f.db.DB, 24*time.Hour, 100); err != nil || n != 1 {
		t.Fatalf("DeleteReceiptKeys = %d, %v; want the old key", n, err)
	}
	_, _, hdr := f.doKey(t, "POST", "/stock/SKU-1/receipts", "application/json", "old-r", `{"quantity":1}`)
	_, v, hdrYoung := f.doKey(t, "POST", "/stock/SKU-1/receipts", "application/json", "young-r", `{"quantity":1}`)
	if hdr.Get("Idempotent-Replayed") != "" || hdrYoung.Get("Idempotent-Replayed") != "true" || v["on_hand"] != float64(103) {
		t.Errorf("forgotten key replayed %q, kept key replayed %q, on hand %v; want a new receipt, a replay, 103",
			hdr.Get("Idempotent-Replayed"), hdrYoung.Get("Idempotent-Replayed"), v["on_hand"])
	}
}
