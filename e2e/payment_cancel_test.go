package e2e

import (
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/sagatest"
)

// The customer cancels while the charge request waits at the payment
// service, before the charge is sent to the PSP: the payment closes within
// seconds as withdrawn (PAYMENT_DEADLINE is the default ten minutes here,
// so nothing waits for it), the held charge request then sends nothing,
// and the PSP's books show no charge for the order.
func TestCancelBeforeTheChargeIsSentClosesThePaymentAtOnce(t *testing.T) {
	t.Parallel()
	s := sagatest.Start(t)
	before := stock(t, s, "SKU-4")
	o, gate := createHeld(t, s, "payment.charge.before-send", "withdraw-1", "SKU-4", 1)
	if r := cancelOrder(t, s, o.OrderID, "withdraw-1-cancel"); r != "cancelled" {
		t.Fatalf("cancel: %q", r)
	}
	var p struct {
		Status          string `json:"status"`
		ChargeSent      bool   `json:"charge_sent"`
		CancelRequested bool   `json:"cancel_requested"`
	}
	sagatest.Eventually(t, 10*time.Second, "the payment to be withdrawn", func() bool {
		s.Payment.Do("GET", "/payments/"+o.OrderID, nil, nil, &p)
		return p.Status == "withdrawn"
	})
	if p.ChargeSent || !p.CancelRequested {
		t.Fatalf("payment %+v, want withdrawn, never sent, with the cancel", p)
	}
	gate.Release()
	sagatest.Eventually(t, 10*time.Second, "the charge request to be processed", func() bool {
		return s.Payment.Failpoints.Hits("payment.charge.before-send") == 1 && inboxHas(t, s.Payment, "payment-psp")
	})
	if c := charges(t, s, o.OrderID); len(c.Charges) != 0 {
		t.Fatalf("PSP charges %+v for an order cancelled before its charge was sent", c.Charges)
	}
	s.Payment.Do("GET", "/payments/"+o.OrderID, nil, nil, &p)
	if p.Status != "withdrawn" {
		t.Fatalf("payment %s after the held charge request ran, want still withdrawn", p.Status)
	}
	sagatest.Eventually(t, 10*time.Second, "the stock to be released", func() bool {
		return stock(t, s, "SKU-4") == before
	})
}

// inboxHas reports whether the service's consumer has processed anything.
func inboxHas(t *testing.T, svc *sagatest.Service, consumer string) bool {
	t.Helper()
	var n int
	if err := svc.DB.Get(&n, `SELECT COUNT(*) FROM consumer_inbox WHERE consumer_name = ?`, consumer); err != nil {
		t.Fatal(err)
	}
	return n > 0
}
