package failpoint

import (
	"net/http"

	"github.com/relmsg/ordersaga/pkg/base/web"
)

// maxBody bounds an arm request; {"action":"pause","count":3} needs far less.
const maxBody = 1 << 10

// Handler returns the JSON admin API, with routes relative to where it is
// mounted. Services mount it in demo mode only, with the prefix stripped
// (chi's Mount does not strip it either):
//
//	r.Mount("/debug/failpoints", http.StripPrefix("/debug/failpoints", failpoint.Default.Handler()))
//
// Routes:
//
//	GET    /                lists armed and known points
//	PUT    /{name}          arms one: {"action":"error|pause|crash","count":N}
//	POST   /{name}/release  releases a paused point
//	DELETE /{name}          disarms one
//	DELETE /                disarms all
//
// Unlike code, the API refuses unknown names, so a typo in a demo fails
// loudly instead of arming a point nothing reaches.
func (r *Registry) Handler() http.Handler {
	e := web.Edge{} // nothing to log: every error here is the caller's
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", e.Handle(r.handleList))
	mux.HandleFunc("DELETE /{$}", e.Handle(r.handleDisableAll))
	mux.HandleFunc("PUT /{name}", e.Handle(known(r.handleArm)))
	mux.HandleFunc("DELETE /{name}", e.Handle(known(r.handleDisable)))
	mux.HandleFunc("POST /{name}/release", e.Handle(known(r.handleRelease)))
	// JSON answers for the rest too, instead of ServeMux's plain text.
	mux.HandleFunc("/{$}", e.Handle(methodNotAllowed("GET, DELETE")))
	mux.HandleFunc("/{name}", e.Handle(methodNotAllowed("PUT, DELETE")))
	mux.HandleFunc("/{name}/release", e.Handle(methodNotAllowed("POST")))
	mux.HandleFunc("/", e.Handle(func(w http.ResponseWriter, req *http.Request) error {
		return web.Errorf(http.StatusNotFound, "no route %s %s", req.Method, req.URL.Path)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// StripPrefix turns a request for the mount point itself into "".
		if req.URL.Path == "" {
			req2 := *req
			u := *req.URL
			u.Path = "/"
			req2.URL = &u
			req = &req2
		}
		mux.ServeHTTP(w, req)
	})
}

func methodNotAllowed(allow string) web.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) error {
		w.Header().Set("Allow", allow)
		return web.Errorf(http.StatusMethodNotAllowed, "method %s not allowed here (allowed: %s)", req.Method, allow)
	}
}

type listResponse struct {
	Armed []Status `json:"armed"`
	Known []Point  `json:"known"`
}

func (r *Registry) handleList(w http.ResponseWriter, req *http.Request) error {
	web.WriteJSON(w, http.StatusOK, listResponse{Armed: r.Armed(), Known: knownPoints()})
	return nil
}

// known hands h the failpoint named in the path; an unknown name is a 404.
func known(h func(w http.ResponseWriter, req *http.Request, name string) error) web.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) error {
		name := req.PathValue("name")
		if err := checkKnown(name); err != nil {
			return web.Errorf(http.StatusNotFound, "%v", err)
		}
		return h(w, req, name)
	}
}

type armRequest struct {
	Action string `json:"action"`
	Count  int    `json:"count"` // 0 or absent: every hit
}

func (r *Registry) handleArm(w http.ResponseWriter, req *http.Request, name string) error {
	var body armRequest
	if err := web.DecodeJSON(w, req, maxBody, &body); err != nil {
		return err
	}
	action, err := parseAction(body.Action)
	if err == nil {
		err = checkCount(action, body.Count)
	}
	if err != nil {
		return web.Errorf(http.StatusBadRequest, "%v", err)
	}
	r.armAction(name, action, body.Count)
	st, _ := r.status(name)
	web.WriteJSON(w, http.StatusOK, st)
	return nil
}

func (r *Registry) handleRelease(w http.ResponseWriter, req *http.Request, name string) error {
	st, ok := r.release(name)
	switch {
	case !ok:
		return web.Errorf(http.StatusNotFound, "failpoint %q is not armed", name)
	case st.Action != ActionPause:
		return web.Errorf(http.StatusConflict, "failpoint %q is armed with %s, not pause", name, st.Action)
	}
	web.WriteJSON(w, http.StatusOK, st)
	return nil
}

func (r *Registry) handleDisable(w http.ResponseWriter, req *http.Request, name string) error {
	r.Disable(name)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (r *Registry) handleDisableAll(w http.ResponseWriter, req *http.Request) error {
	r.DisableAll()
	w.WriteHeader(http.StatusNoContent)
	return nil
}
