package viewer

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/pkg/web"
)

// Handler lists every route of the viewer: the page, and the API the page
// calls. Routes marked "pass" forward to a service and answer what it
// answered.
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(securityHeaders, web.Guard{Hosts: s.cfg.AllowedHosts}.Wrap)
	r.Get("/", s.index) // ?token=: traded for the cookie, then a redirect to /
	r.Get("/static/*", s.staticFile)
	// Liveness and readiness, like every service's, for scripts/up.sh and
	// docker compose: the page needs nothing but its own process to load.
	r.Get("/healthz", ok)
	r.Get("/readyz", ok)

	r.Route("/api", func(api chi.Router) {
		api.Use(s.requireToken) // the viewer's token: cookie or bearer
		// Orders (pass: order).
		api.Get("/orders", s.pass("order", "/orders"))                                                 // ?status=&limit=&before=
		api.Post("/orders", s.pass("order", "/orders"))                                                // header Idempotency-Key
		api.Get("/orders/{id}", s.pass("order", "/orders/{id}"))                                       //
		api.Post("/orders/{id}/cancel", s.pass("order", "/orders/{id}/cancel"))                        // header Idempotency-Key
		api.Get("/orders/{id}/story", s.story)                                                         // the timeline and what it lacks
		api.Get("/stock", s.pass("inventory", "/stock"))                                               // SKUs for the create form
		api.Get("/health", s.health)                                                                   // every service at a glance
		api.Get("/switches", s.switches)                                                               // PSP mode, wrong ways, failpoints
		api.Put("/psp/switches", s.pass("psp", "/psp/switches"))                                       // {"mode":"decline","count":1}
		api.Put("/wrong-way/{service}", s.passTo("/debug/wrong-way"))                                  // {"on":["no-inbox"]}
		api.Put("/failpoints/{service}/{name}", s.passTo("/debug/failpoints/{name}"))                  // {"action":"pause","count":1}
		api.Post("/failpoints/{service}/{name}/release", s.passTo("/debug/failpoints/{name}/release")) //
		api.Delete("/failpoints/{service}/{name}", s.passTo("/debug/failpoints/{name}"))               //
		api.Delete("/failpoints/{service}", s.passTo("/debug/failpoints"))                             // disarm all
		// The failure lab.
		api.Get("/lab/experiments", s.experiments)
		api.Post("/lab/runs", s.startRun) // {"experiment":"atomic-commit","wrong_way":false}
		api.Get("/lab/runs", s.listRuns)
		api.Get("/lab/runs/{run}", s.getRun) // ?after=N: the steps from the Nth on

		api.NotFound(notFound)
		api.MethodNotAllowed(methodNotAllowed)
	})
	r.NotFound(notFound)
	r.MethodNotAllowed(methodNotAllowed)
	return r
}

func ok(w http.ResponseWriter, _ *http.Request) {
	web.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func notFound(w http.ResponseWriter, r *http.Request) {
	web.WriteError(w, r, nil, web.Errorf(http.StatusNotFound, "no route %s %s", r.Method, r.URL.Path))
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	web.WriteError(w, r, nil, web.Errorf(http.StatusMethodNotAllowed, "method %s not allowed on %s", r.Method, r.URL.Path))
}

// securityHeaders keeps the page to its own files: no script, style, font
// or image from anywhere else (it must work offline anyway).
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

func (s *Server) staticFile(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "*")
	if name == "" || name == "index.html" {
		notFound(w, r)
		return
	}
	if _, err := s.static.Open(name); err != nil {
		notFound(w, r)
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeFileFS(w, r, s.static, name)
}
