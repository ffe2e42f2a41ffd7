package orderhttp_test

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/compose/admin"
	"github.com/relmsg/ordersaga/services/order/internal/orderapp"
	"github.com/relmsg/ordersaga/services/order/internal/orderhttp"
)

// adminServer mounts the order API and the order's admin routes behind a
// token, as service.Runtime.Router does. No peers: the timeline shows the
// order service's own rows and says the others were not asked.
func adminServer(t *testing.T) *httptest.Server {
	t.Helper()
	db := sqldbtest.New(t, "order")
	log := slog.New(slog.DiscardHandler)
	app := orderapp.New(db.DB, func() {}, log, orderapp.Config{})
	r := chi.NewRouter()
	orderhttp.Routes(r, app, log)
	r.Route("/admin", func(ar chi.Router) {
		ar.Use(admin.RequireToken("secret", false))
		orderhttp.AdminRoutes(app, log)(ar)
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv
}

func adminDo(t *testing.T, method, url string) (int, map[string]any) {
	t.Helper()
	a := testutil.Call(t, method, url, "", "Authorization", "Bearer secret")
	var out map[string]any
	_ = json.Unmarshal([]byte(a.Body), &out)
	return a.Status, out
}

func TestAdminEndpoints(t *testing.T) {
	t.Parallel()
	srv := adminServer(t)
	code, created, _ := do(t, "POST", srv.URL+"/orders", "application/json", "k-1", good)
	if code != 202 || created["deadline_at"] == nil {
		t.Fatalf("create: %d %v, want 202 with a deadline_at", code, created)
	}
	id := created["order_id"].(string)

	// The timer table.
	code, body := adminDo(t, "GET", srv.URL+"/admin/deadlines")
	if code != 200 || len(body["orders"].([]any)) != 1 {
		t.Fatalf("GET /admin/deadlines: %d %v", code, body)
	}

	// The timeline: the order's creation and its OrderCreated, in order.
	code, body = adminDo(t, "GET", srv.URL+"/admin/orders/"+id+"/timeline")
	if code != 200 || body["order_id"] != id {
		t.Fatalf("timeline: %d %v", code, body)
	}
	var kinds []string
	for _, e := range body["entries"].([]any) {
		kinds = append(kinds, e.(map[string]any)["kind"].(string))
	}
	if len(kinds) != 2 || kinds[0] != "order.created" || kinds[1] != "outbox.written" || body["warnings"] == nil {
		t.Fatalf("timeline kinds = %v warnings %v, want [order.created outbox.written] and a warning", kinds, body["warnings"])
	}
	if code, _ := adminDo(t, "GET", srv.URL+"/admin/orders/999/timeline"); code != 404 {
		t.Fatalf("timeline of an unknown order: %d", code)
	}

	// A run with nothing stale, and the (empty) report.
	code, body = adminDo(t, "POST", srv.URL+"/admin/reconciliation/run")
	if code != 200 || body["run_id"] == "" || body["checked"] != float64(0) || body["trigger"] != "admin" {
		t.Fatalf("run: %d %v", code, body)
	}
	code, body = adminDo(t, "GET", srv.URL+"/admin/reconciliation?limit=10")
	if code != 200 || len(body["repairs"].([]any)) != 0 {
		t.Fatalf("report: %d %v", code, body)
	}
	for _, q := range []string{"?limit=0", "?limit=1001", "?order_id=x"} {
		if code, _ := adminDo(t, "GET", srv.URL+"/admin/reconciliation"+q); code != 400 {
			t.Errorf("GET /admin/reconciliation%s: %d, want 400", q, code)
		}
	}
	// Without the token: refused.
	if code, _, _ := do(t, "POST", srv.URL+"/admin/reconciliation/run", "", "", ""); code != 401 {
		t.Fatalf("run without a token: %d, want 401", code)
	}
}
