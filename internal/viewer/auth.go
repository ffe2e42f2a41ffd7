package viewer

import (
	"crypto/rand"
	"encoding/base64"
	"net/http"

	"github.com/relmsg/ordersaga/pkg/web"
)

// CookieName is the cookie the page's token is kept in once traded.
const CookieName = "ordersaga_viewer"

// NewToken returns a fresh random token (256 bits, URL-safe), as a
// notebook server makes one at start.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it panics first)
	return base64.RawURLEncoding.EncodeToString(b)
}

// index serves the page. Opened with ?token= (the URL scripts/up.sh
// prints), it trades the token for an HttpOnly, SameSite=Strict cookie and
// redirects to the page without it, so the token leaves the address bar,
// the history and any Referer; a wrong token is a 401. Without ?token= the
// page is served as it is (it holds no data): its API calls need the
// cookie, and without one the page says where to find the link.
func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("token") {
		if !web.TokenMatches(r.URL.Query().Get("token"), s.cfg.Token) {
			web.WriteProblem(w, r, web.Errorf(http.StatusUnauthorized,
				"wrong viewer token: open the URL scripts/up.sh printed (http://127.0.0.1:8080/?token=...)"))
			return
		}
		http.SetCookie(w, &http.Cookie{Name: CookieName, Value: s.cfg.Token, Path: "/",
			HttpOnly: true, SameSite: http.SameSiteStrictMode})
		w.Header().Set("Cache-Control", "no-store")
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeFileFS(w, r, s.static, "index.html")
}

// requireToken guards the API: the cookie the page got, or, for curl,
// "Authorization: Bearer <token>". Every /api route wants it, reads
// included: the viewer shows the services' admin data.
func (s *Server) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := web.BearerToken(r)
		if c, err := r.Cookie(CookieName); err == nil && got == "" {
			got = c.Value
		}
		if !web.TokenMatches(got, s.cfg.Token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ordersaga viewer"`)
			web.WriteProblem(w, r, web.Errorf(http.StatusUnauthorized,
				"missing or wrong viewer token: open the URL scripts/up.sh printed (it carries ?token=), or send Authorization: Bearer"))
			return
		}
		next.ServeHTTP(w, r)
	})
}
