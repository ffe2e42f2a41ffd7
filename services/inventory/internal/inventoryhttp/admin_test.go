package inventoryhttp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/relmsg/ordersaga/pkg/base/events"
)

// cancel processes an OrderCancelled (version 2 of the order) through the
// service's consumer and returns its event id.
func (f *fixture) cancel(t *testing.T, orderID uint64) string {
	t.Helper()
	b, _ := json.Marshal(events.OrderCancelledV1{OrderID: orderID, Reason: "user cancel"})
	e := events.Envelope{EventID: uuid.NewString(), Type: events.OrderCancelled, AggregateID: orderID,
		AggregateVersion: 2, SchemaVersion: 1, Payload: b}
	if err := f.c.Process(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	return e.EventID
}

func gapList(t *testing.T, v map[string]any) []map[string]any {
	t.Helper()
	raw, ok := v["gaps"].([]any)
	if !ok {
		t.Fatalf("answer %v has no gaps list", v)
	}
	out := make([]map[string]any, len(raw))
	for i, g := range raw {
		out[i] = g.(map[string]any)
	}
	return out
}

// GET /admin/gaps?open=true lists what the out-of-order experiment leaves:
// a cancel that overtook its create records a gap, overdue once past its
// deadline, resolved when the late create arrives.
func TestAdminGaps(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cancelID := f.cancel(t, 7)

	status, v := f.do(t, "GET", "/admin/gaps?open=true", "", "")
	gaps := gapList(t, v)
	if status != http.StatusOK || len(gaps) != 1 {
		t.Fatalf("GET /admin/gaps?open=true = %d %v, want one open gap", status, v)
	}
	g := gaps[0]
	if g["aggregate_id"] != "7" || g["event_id"] != cancelID || g["event_type"] != events.OrderCancelled ||
		g["expected_version"] != float64(1) || g["received_version"] != float64(2) || g["consumer"] != "inventory" ||
		g["overdue"] != false || g["resolved_at"] != nil || g["alerted_at"] != nil {
		t.Errorf("gap = %v, want order 7's cancel (version 2) waiting for version 1, not overdue", g)
	}

	// Past its deadline, the gap shows as overdue.
	f.db.MustExec(`UPDATE event_gaps SET deadline_at = NOW(6) - INTERVAL 1 SECOND`)
	_, v = f.do(t, "GET", "/admin/gaps?open=true", "", "")
	if gaps := gapList(t, v); len(gaps) != 1 || gaps[0]["overdue"] != true {
		t.Errorf("after the deadline: %v, want one overdue gap", v)
	}

	// The late create resolves it: no open gap, the resolved one is kept.
	f.reserve(t, 7, "SKU-1", 1)
	_, v = f.do(t, "GET", "/admin/gaps?open=true", "", "")
	if gaps := gapList(t, v); len(gaps) != 0 {
		t.Errorf("open gaps after the late create = %v, want none", gaps)
	}
	_, v = f.do(t, "GET", "/admin/gaps", "", "")
	gaps = gapList(t, v)
	if len(gaps) != 1 || gaps[0]["resolved_at"] == nil || gaps[0]["overdue"] != false ||
		!strings.Contains(gaps[0]["resolution"].(string), "recorded as stale") {
		t.Errorf("all gaps = %v, want the one gap resolved as stale", gaps)
	}
	_, v = f.do(t, "GET", "/admin/gaps?aggregate_id=7", "", "")
	if gaps := gapList(t, v); len(gaps) != 1 {
		t.Errorf("gaps of order 7 = %v, want 1", gaps)
	}
	_, v = f.do(t, "GET", "/admin/gaps?aggregate_id=8", "", "")
	if gaps := gapList(t, v); len(gaps) != 0 {
		t.Errorf("gaps of order 8 = %v, want none", gaps)
	}

	for _, path := range []string{"/admin/gaps?open=maybe", "/admin/gaps?limit=x", "/admin/gaps?aggregate_id=-1"} {
		if status, v := f.do(t, "GET", path, "", ""); status != http.StatusBadRequest {
			t.Errorf("GET %s = %d %v, want 400", path, status, v)
		}
	}
	if status, v := f.do(t, "GET", "/admin/gaps?limit=0", "", ""); status != http.StatusUnprocessableEntity {
		t.Errorf("GET /admin/gaps?limit=0 = %d %v, want 422", status, v)
	}
}

// An operator closes a gap whose missing event will not come; only once.
func TestAdminResolveGap(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.cancel(t, 9)
	_, v := f.do(t, "GET", "/admin/gaps?open=true", "", "")
	id := int(gapList(t, v)[0]["id"].(float64))
	path := "/admin/gaps/" + strconv.Itoa(id) + "/resolve"

	if status, v := f.do(t, "POST", path, "application/json", `{"resolution":"  "}`); status != http.StatusUnprocessableEntity {
		t.Errorf("empty resolution = %d %v, want 422", status, v)
	}
	status, v := f.do(t, "POST", path, "application/json", `{"resolution":"order 9 was never created at the source"}`)
	if status != http.StatusOK || v["resolved_at"] == nil || v["resolution"] != "operator: order 9 was never created at the source" {
		t.Errorf("resolve = %d %v, want 200 with the operator's resolution", status, v)
	}
	if status, v := f.do(t, "POST", path, "application/json", `{"resolution":"again"}`); status != http.StatusConflict {
		t.Errorf("second resolve = %d %v, want 409", status, v)
	}
	if status, v := f.do(t, "POST", "/admin/gaps/999/resolve", "application/json", `{"resolution":"x"}`); status != http.StatusNotFound {
		t.Errorf("unknown gap = %d %v, want 404", status, v)
	}
	_, v = f.do(t, "GET", "/admin/gaps?open=true", "", "")
	if gaps := gapList(t, v); len(gaps) != 0 {
		t.Errorf("open gaps = %v, want none", gaps)
	}
}
