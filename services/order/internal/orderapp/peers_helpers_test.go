package orderapp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderapp"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
	"github.com/relmsg/ordersaga/services/order/internal/peerclient"
)

// peer is an httptest fake of inventory's or payment's HTTP API: the
// record of each order (GET /reservations/{id} or /payments/{id}), its
// outbox rows (GET /admin/outbox), inbox rows (GET /admin/inbox) and the
// retry of a failed event. They are HTTP peers of the order service, so a
// fake at the HTTP boundary tests the reconciler's decisions; the real
// services are exercised in e2e. Every request is counted by path, and any
// request under /psp fails the test: the reconciler must never talk to the
// payment provider.
type peer struct {
	t      *testing.T
	srv    *httptest.Server
	prefix string // "/reservations/" or "/payments/"
	token  string

	mu       sync.Mutex
	records  map[string]any    // order id -> record
	outcomes map[string]string // order id -> payment's outcome (GET /payments/{id}/outcome)
	status   map[string]int    // order id -> forced HTTP status (500: broken)
	outbox   map[string][]map[string]any
	inbox    []map[string]any
	inboxErr int // set: GET /admin/inbox answers this status
	retried  []string
	hits     map[string]int
	psp      atomic.Int32
}

func newPeer(t *testing.T, prefix, token string) *peer {
	p := &peer{t: t, prefix: prefix, token: token, records: map[string]any{}, outcomes: map[string]string{}, status: map[string]int{},
		outbox: map[string][]map[string]any{}, hits: map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *peer) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hits[r.Method+" "+r.URL.Path]++
	switch {
	case strings.HasPrefix(r.URL.Path, "/psp"):
		p.psp.Add(1)
		p.t.Errorf("the order service called the PSP: %s %s", r.Method, r.URL)
		writeJSON(w, http.StatusTeapot, map[string]string{"error": "no"})
	case strings.HasPrefix(r.URL.Path, "/admin/"):
		if r.Header.Get("Authorization") != "Bearer "+p.token {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong admin token"})
			return
		}
		p.serveAdmin(w, r)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, p.prefix) && strings.HasSuffix(r.URL.Path, "/outcome"):
		id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, p.prefix), "/outcome")
		outcome, ok := p.outcomes[id]
		p.answer(w, id, ok, "payment not found", map[string]string{"order_id": id, "outcome": outcome, "source": "psp"})
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, p.prefix):
		id := strings.TrimPrefix(r.URL.Path, p.prefix)
		rec, ok := p.records[id]
		p.answer(w, id, ok, "not found", rec)
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such endpoint"})
	}
}

// serveAdmin answers the admin API: the outbox rows of an order, the inbox
// rows of some events, the retry of a failed event. Under p.mu.
func (p *peer) serveAdmin(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/admin/outbox":
		rows := p.outbox[r.URL.Query().Get("aggregate_id")]
		if rows == nil {
			rows = []map[string]any{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"events": rows})
	case r.Method == http.MethodGet && r.URL.Path == "/admin/inbox":
		if p.inboxErr != 0 {
			writeJSON(w, p.inboxErr, map[string]string{"error": "internal error"})
			return
		}
		want := map[string]bool{}
		for _, id := range strings.Split(r.URL.Query().Get("event_id"), ",") {
			want[id] = true
		}
		rows := []map[string]any{}
		for _, row := range p.inbox {
			if want[row["event_id"].(string)] {
				rows = append(rows, row)
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"inbox": rows})
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/admin/outbox/") && strings.HasSuffix(r.URL.Path, "/retry"):
		id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/admin/outbox/"), "/retry")
		for _, rows := range p.outbox {
			for _, row := range rows {
				if row["event_id"] == id && row["status"] == "failed" {
					row["status"] = "pending"
					p.retried = append(p.retried, id)
					writeJSON(w, http.StatusOK, map[string]string{"event_id": id, "status": "pending"})
					return
				}
			}
		}
		writeJSON(w, http.StatusConflict, map[string]string{"error": "no failed event " + id})
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such endpoint"})
	}
}

// answer writes body, what the peer holds of order id: unless a status is
// forced for the order (a broken peer), or the peer holds nothing of it
// (found false: 404 with notFound). Under p.mu.
func (p *peer) answer(w http.ResponseWriter, id string, found bool, notFound string, body any) {
	if code, ok := p.status[id]; ok {
		writeJSON(w, code, map[string]string{"error": "internal error"})
		return
	}
	if !found {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": notFound})
		return
	}
	writeJSON(w, http.StatusOK, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (p *peer) set(orderID uint64, rec map[string]any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := itoa(orderID)
	rec["order_id"] = id
	if _, ok := rec["created_at"]; !ok {
		rec["created_at"] = time.Now().UTC().Add(-5 * time.Minute)
		rec["updated_at"] = time.Now().UTC().Add(-4 * time.Minute)
	}
	p.records[id] = rec
}

func (p *peer) setOutcome(orderID uint64, outcome string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.outcomes[itoa(orderID)] = outcome
}

func (p *peer) setStatus(orderID uint64, code int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status[itoa(orderID)] = code
}

func (p *peer) setOutbox(orderID uint64, rows ...map[string]any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.outbox[itoa(orderID)] = rows
}

func (p *peer) failInbox(code int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inboxErr = code
}

func (p *peer) hit(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits[key]
}

func itoa(id uint64) string { return strconv.FormatUint(id, 10) }

// recon is an order app wired to fake peers, with its own metrics registry.
type recon struct {
	*fixture
	reg       *prometheus.Registry
	inventory *peer
	payment   *peer
	dsn       string // the test database's, for a second pool on it
}

const adminToken = "test-token"

func newRecon(t *testing.T) *recon {
	t.Helper()
	db := sqldbtest.New(t, "order")
	inv := newPeer(t, "/reservations/", adminToken)
	pay := newPeer(t, "/payments/", adminToken)
	reg := prometheus.NewRegistry()
	var wakes atomic.Int32
	app := orderapp.New(db.DB, func() { wakes.Add(1) }, quiet, orderapp.Config{
		Deadlines:  order.Deadlines{Participant: time.Hour, Payment: time.Hour},
		Reconcile:  orderapp.ReconcileConfig{Grace: time.Minute, RefundGrace: time.Minute, Batch: 50},
		Peers:      peerclient.New(inv.srv.URL, pay.srv.URL, adminToken, 2*time.Second),
		Registerer: reg,
	})
	cons := newConsumer(db.DB, app, nil)
	t.Cleanup(func() {
		if n := inv.psp.Load() + pay.psp.Load(); n != 0 {
			t.Errorf("%d calls to the PSP", n)
		}
	})
	return &recon{fixture: &fixture{db: db.DB, app: app, wakes: &wakes, cons: cons}, reg: reg, inventory: inv, payment: pay, dsn: db.DSN}
}

// age pretends the order's last change was ago in the past (its
// updated_at), so it is outside the reconciler's grace window.
func (r *recon) age(t *testing.T, id uint64, ago time.Duration) {
	t.Helper()
	if _, err := r.db.Exec(`UPDATE orders SET updated_at = TIMESTAMPADD(MICROSECOND, -?, NOW(6)) WHERE id = ?`,
		ago.Microseconds(), id); err != nil {
		t.Fatal(err)
	}
}

// runPaused starts a reconciliation run that stops before its first
// repair, and returns when it has: the run goes on when the gate is
// released, and its result comes on the channel.
func (r *recon) runPaused(t *testing.T, ctx context.Context, trigger string) (*failpoint.Gate, <-chan testutil.Returned[orderapp.RunSummary]) {
	t.Helper()
	fp := failpoint.NewRegistry()
	gate := fp.Pause(orderapp.FailpointReconcileBeforeRepair, 1)
	done := testutil.Go(func() (orderapp.RunSummary, error) { return r.app.Reconcile(failpoint.WithRegistry(ctx, fp), trigger) })
	select {
	case <-gate.Reached():
	case <-time.After(10 * time.Second):
		t.Fatal("the reconciliation run never reached its repair")
	}
	return gate, done
}

func (r *recon) run(t *testing.T) orderapp.RunSummary {
	t.Helper()
	sum, err := r.app.Reconcile(context.Background(), "admin")
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	return sum
}

func (r *recon) counter(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return testutil.MustMetric(t, r.reg, name, labels...)
}

type auditRow struct {
	RepairID       string          `db:"repair_id"`
	RunID          string          `db:"run_id"`
	OrderID        uint64          `db:"order_id"`
	Classification string          `db:"classification"`
	Action         string          `db:"action"`
	Outcome        string          `db:"outcome"`
	Detail         string          `db:"detail"`
	Evidence       json.RawMessage `db:"evidence"`
}

func (f *fixture) audits(t *testing.T, orderID uint64) []auditRow {
	t.Helper()
	return selectAll[auditRow](t, f.db, `SELECT repair_id, run_id, order_id, classification, action, outcome, detail, evidence
FROM reconciliation_audit WHERE order_id = ? ORDER BY created_at`, orderID)
}

// history is an order's order_history rows, oldest first, as the service
// reads them (orderdb.History).
func (f *fixture) history(t *testing.T, orderID uint64) []orderdb.Change {
	t.Helper()
	h, err := orderdb.History(context.Background(), f.db, orderID)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
