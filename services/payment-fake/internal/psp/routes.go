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

// Access is who may change what at the PSP.
type Access struct {
	// Demo: the fault switch can be changed only in demo mode.
	Demo bool
	// AdminToken (ADMIN_TOKEN), when set, is wanted for a switch change,
	// as for every service's /debug.
	AdminToken string
	// Token (PSP_TOKEN) is the key the payment service charges and refunds
	// with, as a merchant's secret key at a real provider: when set, a
	// charge or a refund without it is refused (401). With none, charges
	// and refunds are open in demo mode only.
	Token string
}

// Guard puts the PSP's writes behind their keys (Access); reads pass.
// Paths here are the PSP's own: the mount prefix is stripped already.
func Guard(api http.Handler, a Access, log *slog.Logger) http.Handler {
	books := web.RequireToken(a.Token, a.Demo, "PSP_TOKEN")(api)
	switches := web.RequireToken(a.AdminToken, true, "ADMIN_TOKEN")(api)
	return web.Handle(log, func(w http.ResponseWriter, r *http.Request) error {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			api.ServeHTTP(w, r)
			return nil
		}
		switch r.URL.Path {
		case "/switches":
			if !a.Demo {
				return web.Errorf(http.StatusForbidden, "the PSP's fault switches can be changed only with DEMO_MODE=true")
			}
			switches.ServeHTTP(w, r)
		case "/charges", "/refunds":
			books.ServeHTTP(w, r)
		default:
			api.ServeHTTP(w, r)
		}
		return nil
	})
}
