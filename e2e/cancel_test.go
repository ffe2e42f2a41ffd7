package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/sagatest"
	"github.com/relmsg/ordersaga/pkg/base/wire"
)

type refundsJSON = wire.PSPRefundList

func cancelOrder(t *testing.T, s *sagatest.Saga, id, key string) string {
	t.Helper()
	var out wire.CancelResult
	code := s.Order.Do("POST", "/orders/"+id+"/cancel", map[string]string{"Idempotency-Key": key}, wire.CancelOrderRequest{Reason: "test"}, &out)
	if code != 202 && code != 200 {
		t.Fatalf("cancel %s: %d", id, code)
	}
	return out.Result
}

// Cancel after confirm is a new business transaction: the money comes back
// (one refund of the full amount at the PSP) and the goods go back on the
// shelf; the order ends cancelled with refund_status refunded.
func TestCancelAfterConfirmRefundsAndRestocks(t *testing.T) {
	t.Parallel()
	s := sagatest.Start(t)
	before := stock(t, s, "SKU-3")
	o := createOrder(t, s, "cac-1", "c-1", "SKU-3", 2)
	waitStatus(t, s, o.OrderID, "confirmed")
	if r := cancelOrder(t, s, o.OrderID, "cac-cancel"); r != "cancelled" {
		t.Fatalf("cancel result %q, want cancelled", r)
	}
	var got struct {
		Status       string `json:"status"`
		RefundStatus string `json:"refund_status"`
	}
	sagatest.Eventually(t, 30*time.Second, "the refund to complete", func() bool {
		s.Order.Do("GET", "/orders/"+o.OrderID, nil, nil, &got)
		return got.RefundStatus == "refunded"
	})
	if got.Status != "cancelled" {
		t.Fatalf("order %s after the refund, want cancelled", got.Status)
	}
	waitReservation(t, s, o.OrderID, "restocked")
	if after := stock(t, s, "SKU-3"); after != before {
		t.Fatalf("stock after restock = %+v, want %+v", after, before)
	}
	c := charges(t, s, o.OrderID)
	if len(c.Charges) != 1 {
		t.Fatalf("PSP charges = %d, want 1", len(c.Charges))
	}
	var rf refundsJSON
	s.Payment.Do("GET", "/psp/refunds?charge_id="+c.Charges[0].ChargeID, nil, nil, &rf)
	if len(rf.Refunds) != 1 || rf.Refunds[0].AmountCents != c.Charges[0].AmountCents || rf.Refunds[0].Status != "succeeded" {
		t.Fatalf("PSP refunds = %+v, want one refund of %d", rf.Refunds, c.Charges[0].AmountCents)
	}
	if r := cancelOrder(t, s, o.OrderID, "cac-cancel-2"); r != "already_cancelled" {
		t.Fatalf("second cancel: %q, want already_cancelled", r)
	}
}

// Cancels racing the saga: each order is cancelled right after it is
// created, while its OrderCreated, InventoryReserved and charge are in
// flight, so every interleaving happens somewhere among them (cancel before
// the reservation, between reservation and charge, after the charge). Every
// order must end cancelled, the stock must be back where it was, and the
// money charged must all be refunded.
//
// A cancel that reaches payment before the charge was sent withdraws the
// payment at once; one that finds the charge in flight is settled by the
// sweep's status query at the end of the in-flight window
// (PAYMENT_CANCEL_SETTLE, short here), then closed as never charged or
// refunded. Nothing waits for PAYMENT_DEADLINE (the default ten minutes).
func TestCancelRacingTheSaga(t *testing.T) {
	t.Parallel()
	s := sagatest.Start(t,
		sagatest.WithEnv("payment", "PSP_TIMEOUT", "1s"),
		sagatest.WithEnv("payment", "PAYMENT_CANCEL_SETTLE", "2s"),
		sagatest.WithEnv("payment", "PAYMENT_SWEEP_INTERVAL", "500ms"),
		sagatest.WithEnv("payment", "PAYMENT_SWEEP_GRACE", "1s"),
		sagatest.WithEnv("payment", "PAYMENT_RETRY_BASE", "500ms"),
		sagatest.WithEnv("payment", "PAYMENT_RETRY_CAP", "1s"))
	before := stock(t, s, "SKU-4")
	const n = 12
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := createOrder(t, s, fmt.Sprintf("race-%d", i), "c-1", "SKU-4", 1)
			time.Sleep(time.Duration(i) * 2 * time.Millisecond) // spread the cancels over the saga's steps
			cancelOrder(t, s, o.OrderID, fmt.Sprintf("race-cancel-%d", i))
			ids[i] = o.OrderID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		var got struct {
			Status       string `json:"status"`
			RefundStatus string `json:"refund_status"`
		}
		// Settled: payment has closed its side (a cancel marker, withdrawn,
		// closed after its status query, or the charge refunded) and the
		// order has heard about it.
		var pay paymentJSON
		sagatest.Eventually(t, 60*time.Second, "order "+id+" to settle", func() bool {
			s.Order.Do("GET", "/orders/"+id, nil, nil, &got)
			s.Payment.Do("GET", "/payments/"+id, nil, nil, &pay)
			switch pay.Status {
			case "cancelled_before_charge", "withdrawn":
				return got.Status == "cancelled" && got.RefundStatus == "none"
			case "refunded":
				return got.Status == "cancelled" && got.RefundStatus == "refunded"
			}
			return false
		})
		c := charges(t, s, id)
		charged := int64(0)
		for _, ch := range c.Charges {
			if ch.Status == "succeeded" {
				charged += ch.AmountCents
			}
		}
		refunded := int64(0)
		for _, ch := range c.Charges {
			var rf refundsJSON
			s.Payment.Do("GET", "/psp/refunds?charge_id="+ch.ChargeID, nil, nil, &rf)
			for _, r := range rf.Refunds {
				refunded += r.AmountCents
			}
		}
		if len(c.Charges) > 1 || charged != refunded {
			t.Errorf("order %s: %d charge(s), charged %d, refunded %d: want at most one charge, all refunded", id, len(c.Charges), charged, refunded)
		}
		if (charged > 0) != (got.RefundStatus == "refunded") {
			t.Errorf("order %s: charged %d but refund_status %q", id, charged, got.RefundStatus)
		}
	}
	sagatest.Eventually(t, 30*time.Second, "the stock to come back", func() bool {
		return stock(t, s, "SKU-4") == before
	})
}
