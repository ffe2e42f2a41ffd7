package web

import (
	"crypto/subtle"
	"net"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
	"unicode"
)

// Guard is what every server of the stack checks before any route: who is
// asking, as far as a web page in the teacher's browser could pretend
// (docs/security.md).
//
//   - The Host header must name this machine (a loopback address,
//     "localhost" or a name under .localhost) or one of Hosts: a page
//     served by another site that reaches 127.0.0.1 through DNS rebinding
//     sends its own name, and is refused (403 foreign-host).
//   - A request that changes state (any method but GET, HEAD, OPTIONS)
//     from a browser must come from a page of this very origin
//     (http.CrossOriginProtection: Sec-Fetch-Site, else Origin against
//     Host): another site's form or script is refused (403 cross-origin).
//     Programs (curl, the services, the lab) send neither header and pass.
//   - The path must be clean: "..", "//", "." segments and control
//     characters are refused (400 path-not-clean) rather than routed or
//     redirected somewhere else.
type Guard struct {
	// Hosts are the names allowed besides this machine's (ALLOWED_HOSTS:
	// the service names of docker compose), without ports.
	Hosts []string
}

// Wrap returns next behind the guard's checks.
func (g Guard) Wrap(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	allowed := map[string]bool{}
	for _, h := range g.Hosts {
		if h = normalizeHost(h); h != "" {
			allowed[h] = true
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hostAllowed(r.Host, allowed) {
			WriteProblem(w, r, Problemf(http.StatusForbidden, TypeForeignHost,
				"Host %q is not this machine: use 127.0.0.1 or localhost (or add the name to ALLOWED_HOSTS)", r.Host))
			return
		}
		if err := cop.Check(r); err != nil {
			WriteProblem(w, r, Problemf(http.StatusForbidden, TypeCrossOrigin,
				"a %s from another site's page (Origin %q) is refused: state changes come from this origin or from programs", r.Method, r.Header.Get("Origin")))
			return
		}
		if err := cleanPath(r.URL.Path); err != nil {
			WriteProblem(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether the Host header (host or host:port) names
// this machine or a configured name.
func hostAllowed(hostport string, allowed map[string]bool) bool {
	h := normalizeHost(hostport)
	if h == "" {
		return false
	}
	if ip := net.ParseIP(h); ip != nil {
		return ip.IsLoopback() || allowed[h]
	}
	return h == "localhost" || strings.HasSuffix(h, ".localhost") || allowed[h]
}

// normalizeHost lowercases a Host value and drops its port, its IPv6
// brackets and a final dot.
func normalizeHost(hostport string) string {
	h := strings.ToLower(strings.TrimSpace(hostport))
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.Trim(h, "[]"), ".")
	return h
}

// cleanPath refuses a path that is not in its clean form (a trailing
// slash aside) or holds a control character.
func cleanPath(p string) *Error {
	for _, r := range p {
		if unicode.IsControl(r) {
			return Problemf(http.StatusBadRequest, TypeNotClean, "the path holds a control character")
		}
	}
	trimmed := p
	if len(p) > 1 {
		trimmed = strings.TrimSuffix(p, "/")
	}
	if !strings.HasPrefix(p, "/") || path.Clean(p) != trimmed {
		return Problemf(http.StatusBadRequest, TypeNotClean, "path %q is not in its clean form (no \"..\", \".\" or \"//\")", p)
	}
	return nil
}

// RequireToken guards next with a bearer token ("Authorization: Bearer
// <token>"), the value of the setting named variable ("ADMIN_TOKEN"). With
// no token configured, open decides: true lets every request through (demo
// mode on a laptop), false refuses every one (403: the endpoints are off
// until the setting is made).
func RequireToken(token string, open bool, variable string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if token == "" {
				if open {
					next.ServeHTTP(w, r)
					return
				}
				WriteProblem(w, r, Errorf(http.StatusForbidden, "these endpoints are disabled: set %s", variable))
				return
			}
			if !TokenMatches(BearerToken(r), token) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="ordersaga"`)
				WriteProblem(w, r, Errorf(http.StatusUnauthorized, "missing or wrong token (Authorization: Bearer $%s)", variable))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// BearerToken is the token of an "Authorization: Bearer" header, or "".
func BearerToken(r *http.Request) string {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// TokenMatches compares a presented token with the configured one in
// constant time; an empty presented token never matches.
func TokenMatches(got, want string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// RateLimit lets through at most burst requests at once and perSecond
// more each second after that (a token bucket, per process); the rest get
// 429 with Retry-After. It protects what an endpoint calls on every
// request (payment's outcome asks the PSP).
func RateLimit(perSecond, burst float64) func(http.Handler) http.Handler {
	var mu sync.Mutex
	tokens, last := burst, time.Now()
	take := func() bool {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		tokens = min(burst, tokens+now.Sub(last).Seconds()*perSecond)
		last = now
		if tokens < 1 {
			return false
		}
		tokens--
		return true
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !take() {
				w.Header().Set("Retry-After", "1")
				WriteProblem(w, r, Errorf(http.StatusTooManyRequests, "more than %.0f requests a second to %s: retry later", perSecond, r.URL.Path))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
