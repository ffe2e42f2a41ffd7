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
		"PAYMENT_OUTCOME_RECHECK": "5m", // longer than the wait
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

// The deadlines have an order: the order asks payment after payment's own
// deadline has been acted on, and gives up before inventory's lease ends.
// A configuration that breaks it is refused.
func TestRunRefusesDeadlinesOutOfOrder(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"margin within the payment sweep's interval", map[string]string{"PAYMENT_DEADLINE_MARGIN": "5s"}, "PAYMENT_DEADLINE_MARGIN=5s"},
		{"giving up after the lease", map[string]string{"PAYMENT_DEADLINE": "14m"}, "RESERVATION_TTL=15m0s"},
		{"a short lease", map[string]string{"RESERVATION_TTL": "10m"}, "RESERVATION_TTL=10m0s"},
	} {
		err := ordersvc.Run(context.Background(), func(k string) string { return tt.env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error naming %s", tt.name, err, tt.want)
		}
	}
}
