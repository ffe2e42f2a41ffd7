package hostile_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/relmsg/ordersaga/pkg/web"
)

// attack is one hostile request and the refusal it must get.
type attack struct {
	name   string
	method string
	url    string // sent as written: no cleaning of ".." or "//"
	host   string // the Host header, when not the URL's
	header http.Header
	body   string
	status int    // the exact 4xx
	typ    string // the problem type's slug
}

// h builds a header from name, value pairs; a name given twice is sent on
// two lines.
func h(kv ...string) http.Header {
	out := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = append(out[kv[i]], kv[i+1])
	}
	return out
}

// The suite: at least 60 hostile requests across every endpoint of every
// service and of the viewer, each refused with a 4xx problem document; the
// stack writes nothing.
func TestHostileInputsAreRefusedAndWriteNothing(t *testing.T) {
	t.Parallel()
	e := startStack(t)
	e.settle(t)
	before := e.snapshot(t)

	var all []attack
	for _, group := range [][]attack{e.orderAttacks(), e.inventoryAttacks(), e.paymentAttacks(), e.pspAttacks(),
		e.debugAttacks(), e.guardAttacks(), e.protocolAttacks(), e.viewerAttacks()} {
		all = append(all, group...)
	}
	if len(all) < 60 {
		t.Fatalf("only %d hostile requests, want at least 60", len(all))
	}
	byStatus := map[int]int{}
	for _, a := range all {
		t.Run(a.name, func(t *testing.T) {
			byStatus[send(t, a)]++
		})
	}
	t.Logf("%d hostile requests, every one a 4xx problem document: by status %v", len(all), byStatus)
	t.Run("control characters net/http refuses before any handler", func(t *testing.T) { e.rawAttacks(t) })
	t.Run("300 idle connections do not starve the order service's /healthz", func(t *testing.T) { slowloris(t, e.s.Order.URL) })
	t.Run("300 idle connections do not starve the viewer's /healthz", func(t *testing.T) { slowloris(t, e.viewer) })

	if changed := diff(before, e.snapshot(t)); len(changed) > 0 {
		t.Fatalf("the hostile requests wrote:\n%s", strings.Join(changed, "\n"))
	}
}

// send sends a and checks its refusal: the status, and a problem document
// with every member of RFC 9457 and the expected type. It returns the status.
func send(t *testing.T, a attack) int {
	t.Helper()
	req, err := http.NewRequest(a.method, a.url, strings.NewReader(a.body))
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = opaque(a.url) // the path exactly as written
	if a.host != "" {
		req.Host = a.host
	}
	for k, vs := range a.header {
		req.Header[k] = vs
	}
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", a.method, a.url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 500 {
		t.Fatalf("%s %s = %d %s: a server error", a.method, a.url, resp.StatusCode, body)
	}
	var p web.Problem
	if ct := resp.Header.Get("Content-Type"); ct != web.ProblemContentType || json.Unmarshal(body, &p) != nil {
		t.Fatalf("%s %s = %d %q (%s), want a problem document", a.method, a.url, resp.StatusCode, body, ct)
	}
	if resp.StatusCode != a.status || p.Status != a.status || p.Type != web.ProblemTypeBase+a.typ ||
		p.Title == "" || p.Detail == "" || p.Instance == "" {
		t.Errorf("%s %s = %d %s, want %d %s with a title, detail and instance", a.method, a.url, resp.StatusCode, body, a.status, a.typ)
	}
	return resp.StatusCode
}

// opaque is the request target of a URL as written (path and query).
func opaque(u string) string {
	rest := u[strings.Index(u, "://")+3:]
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		path := rest[i:]
		if j := strings.IndexByte(path, '?'); j >= 0 {
			path = path[:j]
		}
		return path
	}
	return "/"
}

// noRedirects shows a redirect instead of following it: a 3xx is a
// failure here too.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
