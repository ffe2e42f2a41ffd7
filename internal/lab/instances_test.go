package lab

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/relmsg/ordersaga/pkg/base/events"
)

// twoOrders is a target with two order instances and one of each other
// service; each instance records the failpoint calls it gets.
type twoOrders struct {
	mu    sync.Mutex
	calls map[string][]string // instance -> "PUT point"
	in    map[string][]Instance
}

func (f *twoOrders) URL(svc string) string                          { return f.in[svc][0].URL }
func (f *twoOrders) Instances(svc string) []Instance                { return f.in[svc] }
func (f *twoOrders) Publish(context.Context, events.Envelope) error { return nil }
func (f *twoOrders) PrepareCrash(context.Context, string) error     { return nil }
func (f *twoOrders) AwaitRestart(context.Context, string) error     { return nil }
func (f *twoOrders) got(id string) []string                         { f.mu.Lock(); defer f.mu.Unlock(); return f.calls[id] }

func newTwoOrders(t *testing.T) *twoOrders {
	f := &twoOrders{calls: map[string][]string{}, in: map[string][]Instance{}}
	add := func(svc, id string) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			f.calls[id] = append(f.calls[id], r.Method+" "+strings.TrimPrefix(r.URL.Path, "/debug/failpoints/"))
			f.mu.Unlock()
			if r.Method == http.MethodGet {
				json.NewEncoder(w).Encode(map[string]any{"armed": []FailpointStatus{{Name: "p", Action: "pause", Hits: 1, Paused: 1}}})
				return
			}
			w.Write([]byte(`{}`))
		}))
		t.Cleanup(srv.Close)
		f.in[svc] = append(f.in[svc], Instance{ID: id, URL: srv.URL})
	}
	add("order", "order-1")
	add("order", "order-2")
	add("inventory", "inventory-1")
	add("payment", "payment-fake-1")
	return f
}

// -instance order-2 narrows the order service's failpoints to order-2;
// the default (all) sets them on both; the steps say which.
func TestFailpointsOnOneInstanceOrAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTwoOrders(t)
	var steps []Step
	l := New(f, "", nil)
	l.Steps = func(s Step) { steps = append(steps, s) }

	l.Instance = "order-2"
	if err := l.arm(ctx, "order", "order.create.after-commit", "error", 1); err != nil {
		t.Fatal(err)
	}
	if len(f.got("order-1")) != 0 || !slices.Equal(f.got("order-2"), []string{"PUT order.create.after-commit"}) {
		t.Errorf("narrowed to order-2: order-1 got %v, order-2 got %v", f.got("order-1"), f.got("order-2"))
	}
	if got := steps[len(steps)-1].Instances; !slices.Equal(got, []string{"order-2"}) {
		t.Errorf("armed step names %v, want [order-2]", got)
	}
	// A service the name is not an instance of keeps all its instances.
	if err := l.arm(ctx, "inventory", "inbox.after-claim", "error", 1); err != nil || len(f.got("inventory-1")) != 1 {
		t.Errorf("inventory: %v, calls %v", err, f.got("inventory-1"))
	}

	l.Instance = AllInstances
	if err := l.setWrongWay(ctx, "order", "publish-before-commit"); err != nil {
		t.Fatal(err)
	}
	if len(f.got("order-1")) != 1 || len(f.got("order-2")) != 2 {
		t.Errorf("all: order-1 got %v, order-2 got %v; want the switch on both", f.got("order-1"), f.got("order-2"))
	}
	if got := steps[len(steps)-1].Instances; !slices.Equal(got, []string{"order-1", "order-2"}) {
		t.Errorf("wrong-way step names %v, want both", got)
	}
	// Hits and paused callers are summed over the instances.
	if st, err := l.failpoint(ctx, "order", "p"); err != nil || st.Hits != 2 || st.Paused != 2 {
		t.Errorf("failpoint over all = %+v, %v; want 2 hits, 2 paused", st, err)
	}

	if err := CheckInstance(f, "order-3"); err == nil || !strings.Contains(err.Error(), "order-2") {
		t.Errorf("CheckInstance(order-3) = %v, want an error listing the instances", err)
	}
	for _, ok := range []string{"all", "", "order-2", "payment-fake-1"} {
		if err := CheckInstance(f, ok); err != nil {
			t.Errorf("CheckInstance(%q) = %v", ok, err)
		}
	}
}
