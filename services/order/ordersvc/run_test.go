package ordersvc_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/relmsg/ordersaga/services/order/ordersvc"
)

// A misconfigured order service reports every bad setting at once, before
// it touches the database or the broker.
func TestRunReportsEveryBadSetting(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"PARTICIPANT_DEADLINE":    "soon",
		"PAYMENT_DEADLINE":        "-1m",
		"DEADLINE_SWEEP_INTERVAL": "0s",
		"RECONCILE_GRACE":         "x",
		"RECONCILE_BATCH":         "0",
		"INVENTORY_URL":           "ftp://inventory",
		"PAYMENT_URL":             "not a url",
	}
	err := ordersvc.Run(context.Background(), func(k string) string { return env[k] }, io.Discard)
	if err == nil {
		t.Fatal("Run accepted a bad configuration")
	}
	for key := range env {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("the error does not name %s: %v", key, err)
		}
	}
}
