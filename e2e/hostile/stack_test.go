// Package hostile_test is the hostile-input suite (docs/security.md): the
// three services, the fake PSP and the saga viewer, started in-process on
// the real MariaDB and RabbitMQ, are sent malformed, ambiguous, oversized
// and foreign requests on every endpoint. Each must be refused with a 4xx
// problem document (never a 5xx), and write nothing: every table of every
// schema has the same row count and checksum after the suite as before,
// and the demo switches (failpoints, wrong ways, the PSP's switch) are
// unchanged. It runs in scripts/test.sh like any package.
package hostile_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/sagatest"
	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/internal/viewer"
	"github.com/relmsg/ordersaga/pkg/base/web"
)

const (
	adminToken  = "hostile-admin-token"
	viewerToken = "hostile-viewer-token"
)

// env is the stack under attack: its base URLs and what the refusals need.
type env struct {
	s      *sagatest.Saga
	viewer string // the viewer's base URL
	order  string // a settled, confirmed order's id
	charge string // its PSP charge id
	pspKey string // the PSP's key (PSP_TOKEN)
}

// startStack starts the stack with ADMIN_TOKEN set (so /admin and /debug
// want it), the reconciler off (it would write a check row for the order
// while the suite runs), and the viewer served as cmd/viewer serves it.
func startStack(t *testing.T) *env {
	t.Helper()
	var opts []sagatest.Option
	for _, svc := range []string{"order", "inventory", "payment", "psp"} {
		opts = append(opts, sagatest.WithEnv(svc, "ADMIN_TOKEN", adminToken))
	}
	opts = append(opts, sagatest.WithEnv("order", "RECONCILE", "off"))
	s := sagatest.Start(t, opts...)
	e := &env{s: s, pspKey: s.PSP.Env["PSP_TOKEN"]}
	e.viewer = serveViewer(t, s)
	return e
}

// serveViewer runs a viewer of s through web.Serve, with its timeouts,
// as cmd/viewer does.
func serveViewer(t *testing.T, s *sagatest.Saga) string {
	t.Helper()
	srv := viewer.New(viewer.Config{Target: sagatest.NewTarget(t, s), Token: viewerToken, AdminToken: adminToken, Patience: time.Minute})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close) // after the server below has stopped
	testutil.Background(t, "viewer", func(ctx context.Context) error {
		if err := web.Serve(ctx, ln, srv.Handler(), 5*time.Second); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	return "http://" + ln.Addr().String()
}

// settle makes one order, waits until the saga is over for it (confirmed,
// every outbox row sent, every delivery processed), and remembers it: the
// refusals below aim at it, and the tables must stand still around them.
func (e *env) settle(t *testing.T) {
	t.Helper()
	var o struct {
		OrderID string `json:"order_id"`
	}
	code := e.s.Order.Do("POST", "/orders", map[string]string{"Idempotency-Key": "hostile-seed"},
		map[string]any{"customer_id": "c-hostile", "items": []map[string]any{{"sku": "SKU-2", "quantity": 1}}}, &o)
	if code != http.StatusAccepted {
		t.Fatalf("seed order: %d", code)
	}
	e.order = o.OrderID
	sagatest.Eventually(t, 60*time.Second, "order "+o.OrderID+" confirmed and every message handled", func() bool {
		var status string
		_ = e.s.Order.DB.Get(&status, "SELECT status FROM orders WHERE id = ?", o.OrderID)
		pending, inbox := 0, 0
		for _, db := range e.dbs() {
			var p, i int
			_ = db.Get(&p, "SELECT COUNT(*) FROM outbox_events WHERE status <> 'sent'")
			_ = db.Get(&i, "SELECT COUNT(*) FROM consumer_inbox")
			pending, inbox = pending+p, inbox+i
		}
		// Six deliveries end to end (docs/walkthrough.md).
		return status == "confirmed" && pending == 0 && inbox == 6
	})
	if err := e.s.Payment.DB.Get(&e.charge, "SELECT psp_charge_id FROM payments WHERE order_id = ?", o.OrderID); err != nil {
		t.Fatal(err)
	}
}

type database interface {
	Get(dest any, query string, args ...any) error
	Select(dest any, query string, args ...any) error
}

// dbs are the three schemas (the PSP's tables are in payment's).
func (e *env) dbs() map[string]database {
	return map[string]database{"order": e.s.Order.DB, "inventory": e.s.Inventory.DB, "payment": e.s.Payment.DB}
}

// snapshot is every table of every schema, with its row count and its
// checksum (an UPDATE changes the one, an INSERT or DELETE both), and the
// demo switches each process holds in memory.
func (e *env) snapshot(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for schema, db := range e.dbs() {
		var tables []string
		if err := db.Select(&tables, "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()"); err != nil {
			t.Fatal(err)
		}
		if len(tables) < 5 {
			t.Fatalf("%s: only %v", schema, tables)
		}
		for _, tb := range tables {
			var n int
			var sum struct {
				Table    string `db:"Table"`
				Checksum *int64 `db:"Checksum"`
			}
			if err := db.Get(&n, "SELECT COUNT(*) FROM `"+tb+"`"); err != nil {
				t.Fatal(err)
			}
			if err := db.Get(&sum, "CHECKSUM TABLE `"+tb+"`"); err != nil {
				t.Fatal(err)
			}
			out[schema+"."+tb] = fmt.Sprintf("rows=%d checksum=%v", n, deref(sum.Checksum))
		}
	}
	for key, path := range map[string]string{"order failpoints": "/debug/failpoints", "order wrong ways": "/debug/wrong-way"} {
		out[key] = e.get(t, e.s.Order.URL+path)
	}
	out["inventory failpoints"] = e.get(t, e.s.Inventory.URL+"/debug/failpoints")
	out["payment wrong ways"] = e.get(t, e.s.Payment.URL+"/debug/wrong-way")
	out["psp switch"] = e.get(t, e.s.PSP.URL+"/psp/switches")
	out["psp failpoints"] = e.get(t, e.s.PSP.URL+"/debug/failpoints")
	return out
}

func deref(p *int64) any {
	if p == nil {
		return "null"
	}
	return *p
}

// get reads a demo endpoint with the admin token (the hits counters of an
// armed failpoint would show as a change too).
func (e *env) get(t *testing.T, url string) string {
	t.Helper()
	a := testutil.Call(t, http.MethodGet, url, "", "Authorization", "Bearer "+adminToken)
	return fmt.Sprintf("%d %s", a.Status, a.Body)
}

// diff lists what changed between two snapshots.
func diff(before, after map[string]string) []string {
	var out []string
	for k, v := range before {
		if after[k] != v {
			out = append(out, fmt.Sprintf("%s: %s -> %s", k, v, after[k]))
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			out = append(out, fmt.Sprintf("%s: new, %s", k, v))
		}
	}
	sort.Strings(out)
	return out
}
