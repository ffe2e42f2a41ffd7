package pspsvc_test

import (
	"context"
	"testing"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp/psptest"
	"github.com/relmsg/ordersaga/services/payment-fake/pspsvc"
)

// One PSP process, two callers (two payment instances): one decline switch
// applies to the charges of both, and both see the same books.
func TestOneSwitchForEveryCaller(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "payment")
	addr := testutil.FreeAddr(t)
	env := map[string]string{"HTTP_ADDR": addr, "MYSQL_DSN": db.DSN, "MYSQL_CREATE_DATABASE": "false", "DEMO_MODE": "true",
		"LOG_LEVEL": "warn", "INSTANCE_ID": "psp"}
	testutil.Process(t, pspsvc.Run, env)
	base := "http://" + addr
	testutil.WaitReady(t, base)
	ctx := context.Background()

	one := psp.NewClient(base+"/psp", nil)
	two := psp.NewClient("http://127.0.0.1:1/psp,"+base+"/psp", nil) // its first address is down
	books := psptest.New(base + "/psp")
	if err := books.SetSwitch(ctx, psp.Switch{Mode: psp.ModeDecline, Count: 2}); err != nil {
		t.Fatal(err)
	}
	for i, c := range []*psp.Client{one, two} {
		key := []string{"charge-1", "charge-2"}[i]
		ch, err := c.Charge(ctx, psp.ChargeRequest{IdempotencyKey: key, OrderRef: key[7:], CustomerID: "c-1", AmountCents: 100, Currency: "EUR"})
		if err != nil || ch.Status != psp.StatusDeclined {
			t.Errorf("caller %d: charge %+v, %v; want declined by the one switch", i+1, ch, err)
		}
	}
	if sw, err := books.Switch(ctx); err != nil || sw.Mode != psp.ModeNormal {
		t.Errorf("switch after its two calls: %+v, %v; want back to normal", sw, err)
	}
	if got, err := one.GetCharge(ctx, "charge-2"); err != nil || got.Status != psp.StatusDeclined {
		t.Errorf("the first caller sees the second's charge: %+v, %v", got, err)
	}
}
