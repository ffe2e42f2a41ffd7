package viewer

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/web"
	"github.com/relmsg/ordersaga/pkg/base/wire"
)

// serviceHealth is one service at a glance, read from its own endpoints.
type serviceHealth struct {
	Up        bool            `json:"up"`         // /readyz answered 200
	Ready     string          `json:"ready"`      // what /readyz said when it was not ready
	StartedAt string          `json:"started_at"` // /healthz: a restart shows as a new time
	Outbox    json.RawMessage `json:"outbox"`     // /admin/outbox/summary: by_status, oldest_pending_age_seconds
	// Dead letters still dead, waiting for an operator (counted up to 1000).
	DeadLetters int `json:"dead_letters"`
	// Delta events waiting for an earlier version, and how many are overdue.
	Parked        int      `json:"parked"`
	ParkedOverdue int      `json:"parked_overdue"`
	Warnings      []string `json:"warnings"`
}

// health is the stack at a glance.
type health struct {
	Services map[string]*serviceHealth `json:"services"`
	// OpenOrders counts orders in each open status (up to 500 each).
	OpenOrders map[string]int `json:"open_orders"`
	// OpenGaps counts inventory's ordering gaps not yet closed.
	OpenGaps int `json:"open_gaps"`
	// NeedsAttention counts payment's parked charges and refunds.
	NeedsAttention int `json:"needs_attention"`
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	h := health{Services: map[string]*serviceHealth{}, OpenOrders: map[string]int{}}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	do := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	for _, svc := range []string{"order", "inventory", "payment"} {
		sh := &serviceHealth{Warnings: []string{}}
		h.Services[svc] = sh
		for _, read := range s.serviceReads(ctx, svc, sh, &mu) {
			do(read)
		}
	}
	for _, status := range []string{"pending_inventory", "awaiting_payment"} {
		do(func() {
			n := s.count(ctx, "order", "/orders?limit=500&status="+status, "orders")
			mu.Lock()
			h.OpenOrders[status] = n
			mu.Unlock()
		})
	}
	do(func() { h.OpenGaps = s.count(ctx, "inventory", "/admin/gaps?open=true&limit=1000", "gaps") })
	do(func() {
		var out wire.NeedsAttention
		if s.getInto(ctx, "payment", "/admin/needs-attention?limit=1000", &out) == nil {
			h.NeedsAttention = len(out.Charges) + len(out.Refunds)
		}
	})
	wg.Wait()
	web.WriteJSON(w, http.StatusOK, h)
}

// serviceReads are the reads that fill in one service's health, to run at
// once: readiness and start time, outbox summary, dead letters, parked
// events. mu guards sh's warnings.
func (s *Server) serviceReads(ctx context.Context, svc string, sh *serviceHealth, mu *sync.Mutex) []func() {
	warn := func(msg string) {
		mu.Lock()
		sh.Warnings = append(sh.Warnings, msg)
		mu.Unlock()
	}
	return []func(){
		func() {
			a := s.get(ctx, svc, "/readyz")
			sh.Up = a.ok()
			if !sh.Up {
				sh.Ready = a.problem(svc, "/readyz")
			}
			var hz wire.Health
			if s.getInto(ctx, svc, "/healthz", &hz) == nil {
				sh.StartedAt = hz.StartedAt.Format(time.RFC3339Nano)
			}
		},
		func() {
			a := s.get(ctx, svc, "/admin/outbox/summary")
			if a.ok() {
				sh.Outbox = a.Body
			} else {
				warn(a.problem(svc, "/admin/outbox/summary"))
			}
		},
		func() {
			var out struct {
				DeadLetters []json.RawMessage `json:"dead_letters"`
			}
			if err := s.getInto(ctx, svc, "/admin/dead-letters?status=dead&limit=1000", &out); err != nil {
				warn(err.Error())
			}
			sh.DeadLetters = len(out.DeadLetters)
		},
		func() {
			var out struct {
				Parked []struct {
					DeadlineAt string `json:"deadline_at"`
				} `json:"parked"`
			}
			var overdue struct {
				Parked []json.RawMessage `json:"parked"`
			}
			if err := s.getInto(ctx, svc, "/admin/parked?state=waiting&limit=1000", &out); err != nil {
				warn(err.Error())
			}
			if err := s.getInto(ctx, svc, "/admin/parked?state=overdue&limit=1000", &overdue); err != nil {
				warn(err.Error())
			}
			sh.Parked, sh.ParkedOverdue = len(out.Parked), len(overdue.Parked)
		},
	}
}

// count is the length of the list under key in a service's answer; -1 when
// the service could not say.
func (s *Server) count(ctx context.Context, service, path, key string) int {
	var out map[string][]json.RawMessage
	if err := s.getInto(ctx, service, path, &out); err != nil {
		return -1
	}
	return len(out[key])
}

// switchboard is every demo switch of the stack with its current state.
type switchboard struct {
	PSP        json.RawMessage            `json:"psp"`        // GET /psp/switches
	WrongWay   map[string]json.RawMessage `json:"wrong_way"`  // service -> GET /debug/wrong-way
	Failpoints map[string]json.RawMessage `json:"failpoints"` // service -> GET /debug/failpoints
}

func (s *Server) switches(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	sb := switchboard{WrongWay: map[string]json.RawMessage{}, Failpoints: map[string]json.RawMessage{}}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	// keep stores the service's answer, or its error as {"error": ...}
	// (a service not in demo mode answers 404 there).
	keep := func(service, path string, into func(json.RawMessage)) {
		defer wg.Done()
		a := s.get(ctx, service, path)
		body := a.Body
		if !a.ok() {
			body, _ = json.Marshal(map[string]string{"error": a.problem(service, path)})
		}
		mu.Lock()
		into(body)
		mu.Unlock()
	}
	wg.Add(1)
	go keep("psp", "/psp/switches", func(b json.RawMessage) { sb.PSP = b })
	for _, svc := range []string{"order", "inventory", "payment"} {
		wg.Add(2)
		go keep(svc, "/debug/wrong-way", func(b json.RawMessage) { sb.WrongWay[svc] = b })
		go keep(svc, "/debug/failpoints", func(b json.RawMessage) { sb.Failpoints[svc] = b })
	}
	wg.Wait()
	web.WriteJSON(w, http.StatusOK, sb)
}
