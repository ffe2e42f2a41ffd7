package admin_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/deadletter"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

// POST /admin/dead-letters/{id}/correct sends a corrected event in place of
// a dead letter: a new message_id, the fixed body, the header
// corrects_event_id = the dead event's id, on the consumer's own queue; the
// row is listed as corrected with the correction's id and the reason. What
// it refuses publishes nothing.
func TestCorrectEndpoint(t *testing.T) {
	t.Parallel()
	a := newRedriveAdmin(t)
	r, queue := a.router, a.queue
	e := a.deadPayment(t, `{"order_id":"77","amount_cents":-1}`, "invalid event: amount_cents must be positive")
	fixed := `{"payload": {"order_id": "77", "amount_cents": 1500, "currency": "EUR", "charge_id": "ch_1"}, "reason": "PSP record ch_1"}`

	for _, tc := range []struct {
		path, body string
		want       int
	}{
		{"/admin/dead-letters/x/correct", fixed, http.StatusBadRequest},
		{"/admin/dead-letters/999/correct", fixed, http.StatusNotFound},
		{"/admin/dead-letters/1/correct", `{"payload": {"order_id":"77","amount_cents":-1}, "reason": "again"}`, http.StatusUnprocessableEntity},
		{"/admin/dead-letters/1/correct", `{"payload": {"order_id":"77"}}`, http.StatusUnprocessableEntity},
	} {
		if code, out := call(t, r, http.MethodPost, tc.path, tc.body); code != tc.want {
			t.Fatalf("POST %s %s = %d %v, want %d", tc.path, tc.body, code, out, tc.want)
		}
	}

	code, out := call(t, r, http.MethodPost, "/admin/dead-letters/1/correct", fixed)
	corr, _ := out["correction_event_id"].(string)
	if code != http.StatusOK || out["outcome"] != deadletter.OutcomeCorrected || out["event_id"] != e.EventID || corr == "" || corr == e.EventID {
		t.Fatalf("correct = %d %v, want 200, corrected, a new event id", code, out)
	}
	got := rabbittest.Drain(t, queue, 1, 5*time.Second)
	if len(got) != 1 || got[0].MessageId != corr || got[0].Headers[events.HeaderCorrectsEventID] != e.EventID ||
		got[0].Type != e.Type || string(got[0].Body) != `{"order_id":"77","amount_cents":1500,"currency":"EUR","charge_id":"ch_1"}` {
		t.Fatalf("queue holds %d messages (%+v), want the correction %s naming %s", len(got), got, corr, e.EventID)
	}
	if code, out := call(t, r, http.MethodPost, "/admin/dead-letters/1/correct", fixed); code != http.StatusConflict {
		t.Fatalf("second correct = %d %v, want 409", code, out)
	}
	code, out = call(t, r, http.MethodGet, "/admin/dead-letters?status=corrected", "")
	rows, _ := out["dead_letters"].([]any)
	if code != http.StatusOK || len(rows) != 1 {
		t.Fatalf("GET corrected = %d %v, want the row", code, out)
	}
	if row := rows[0].(map[string]any); row["correction_event_id"] != corr || row["correction_reason"] != "PSP record ch_1" {
		t.Fatalf("listed row = %v, want the correction's id and reason", row)
	}
}
