package psp

import (
	"log/slog"
	"net/http"

	"github.com/relmsg/ordersaga/pkg/web"
)

// routes lists every endpoint of the PSP, relative to where it is mounted
// (the PSP process, pspsvc, mounts it under /psp).
func (s *Server) routes() http.Handler {
	e := web.Edge{Log: s.log, Map: httpError}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", e.Handle(s.handleCreateCharge))   // charge once per idempotency key
	mux.HandleFunc("GET /charges/{key}", e.Handle(s.handleGetCharge)) // status query by idempotency key
	mux.HandleFunc("GET /charges", e.Handle(s.handleListCharges))     // ?order_ref=42: every charge of an order
	mux.HandleFunc("POST /refunds", e.Handle(s.handleCreateRefund))   // refund once per idempotency key
	mux.HandleFunc("GET /refunds/{key}", e.Handle(s.handleGetRefund)) // status query by idempotency key
	mux.HandleFunc("GET /refunds", e.Handle(s.handleListRefunds))     // ?charge_id=ch_...: every refund of a charge
	mux.HandleFunc("GET /switches", e.Handle(s.handleGetSwitch))      // the fault switch
	mux.HandleFunc("PUT /switches", e.Handle(s.handlePutSwitch))      // {"mode":"lose-response","delay_ms":0,"count":1}
	mux.HandleFunc("/", e.Handle(s.handleNotFound))                   // JSON 404 for everything else
	return mux
}

// GuardSwitches refuses changes to the fault switch outside demo mode;
// reading it (GET /switches) and everything else pass through. Paths here
// are the PSP's own: the mount prefix is stripped already.
func GuardSwitches(api http.Handler, demoMode bool, log *slog.Logger) http.Handler {
	if demoMode {
		return api
	}
	return web.Handle(log, func(w http.ResponseWriter, r *http.Request) error {
		if r.URL.Path == "/switches" && r.Method != http.MethodGet && r.Method != http.MethodHead {
			return web.Errorf(http.StatusForbidden, "the PSP's fault switches can be changed only with DEMO_MODE=true")
		}
		api.ServeHTTP(w, r)
		return nil
	})
}
