package hostile_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

const point = "outbox.dispatch.after-claim"

// debugAttacks try the demo mode's switches the way another site's page or
// a stranger on the machine without the token would.
func (e *env) debugAttacks() []attack {
	o, i, p := e.s.Order.URL, e.s.Inventory.URL, e.s.Payment.URL
	arm := `{"action":"crash","count":1}`
	evil := "http://evil.example"
	return []attack{
		{"arm a crash: no token", "PUT", o + "/debug/failpoints/" + point, "", asJSON(), arm, 401, "unauthorized"},
		{"arm a crash: wrong token", "PUT", o + "/debug/failpoints/" + point, "", asJSON("Authorization", "Bearer guess"), arm, 401, "unauthorized"},
		{"arm a crash: foreign Host", "PUT", o + "/debug/failpoints/" + point, "evil.example:8081", asJSON("Authorization", admin), arm, 403, "foreign-host"},
		{"arm a crash: foreign Origin", "PUT", o + "/debug/failpoints/" + point, "", asJSON("Authorization", admin, "Origin", evil), arm, 403, "cross-origin"},
		{"release: a simple cross-site form POST", "POST", o + "/debug/failpoints/" + point + "/release", "",
			h("Content-Type", "application/x-www-form-urlencoded", "Origin", evil, "Authorization", admin), "x=1", 403, "cross-origin"},
		{"disarm all: cross-site by Sec-Fetch-Site", "DELETE", i + "/debug/failpoints", "", h("Sec-Fetch-Site", "cross-site", "Authorization", admin), "", 403, "cross-origin"},
		{"wrong way: no token", "PUT", p + "/debug/wrong-way", "", asJSON(), `{"on":["ack-before-commit"]}`, 401, "unauthorized"},
		{"wrong way: foreign Origin", "PUT", i + "/debug/wrong-way", "", asJSON("Authorization", admin, "Origin", evil), `{"on":["no-inbox"]}`, 403, "cross-origin"},
		{"wrong way: the switch list twice", "PUT", o + "/debug/wrong-way", "", asJSON("Authorization", admin), `{"on":[],"on":["no-inbox"]}`, 400, "ambiguous-json"},
		{"profiles: no token", "GET", p + "/debug/pprof/", "", nil, "", 401, "unauthorized"},
		{"psp failpoint: no token", "PUT", e.s.PSP.URL + "/debug/failpoints/psp.charge.after-charge-before-response", "", asJSON(), arm, 401, "unauthorized"},
	}
}

// guardAttacks: a page that reached a service through DNS rebinding (its
// own name in Host), a request from another site's page that would
// otherwise be valid, and paths that try to walk elsewhere.
func (e *env) guardAttacks() []attack {
	o, i, p, s := e.s.Order.URL, e.s.Inventory.URL, e.s.Payment.URL, e.s.PSP.URL
	return []attack{
		{"rebinding: read orders", "GET", o + "/orders", "evil.example", nil, "", 403, "foreign-host"},
		{"rebinding: a nip.io name for 127.0.0.1", "GET", i + "/stock", "127.0.0.1.nip.io:8082", nil, "", 403, "foreign-host"},
		{"rebinding: 0.0.0.0", "GET", p + "/payments/" + e.order, "0.0.0.0:8083", nil, "", 403, "foreign-host"},
		{"rebinding: the PSP's books", "GET", s + "/psp/charges?order_ref=" + e.order, "attacker.test", nil, "", 403, "foreign-host"},
		{"rebinding: health", "GET", o + "/healthz", "evil.example", nil, "", 403, "foreign-host"},
		{"a valid order from another site's page", "POST", o + "/orders", "", asJSON("Idempotency-Key", "h-x", "Origin", "http://evil.example"), goodOrder, 403, "cross-origin"},
		{"a valid receipt from a null Origin", "POST", i + "/stock/SKU-1/receipts", "", asJSON("Idempotency-Key", "h-x", "Origin", "null"), `{"quantity":5}`, 403, "cross-origin"},
		{"path: dot-dot into admin", "GET", o + "/orders/../admin/outbox", "", nil, "", 400, "path-not-clean"},
		{"path: a doubled slash", "GET", i + "/admin//gaps", "", h("Authorization", admin), "", 400, "path-not-clean"},
		{"path: encoded dot-dot", "GET", p + "/payments/%2e%2e/admin/needs-attention", "", nil, "", 400, "path-not-clean"},
		{"path: encoded slashes to the switch", "PUT", s + "/psp/charges/..%2f..%2fswitches", "", asJSON(), `{"mode":"decline"}`, 400, "path-not-clean"},
		{"path: a dot segment", "POST", o + "/orders/./" + e.order + "/cancel", "", asJSON("Idempotency-Key", "h-y"), ``, 400, "path-not-clean"},
	}
}

// protocolAttacks: methods and media types an endpoint does not take.
func (e *env) protocolAttacks() []attack {
	o, i, p, s := e.s.Order.URL, e.s.Inventory.URL, e.s.Payment.URL, e.s.PSP.URL
	return []attack{
		{"DELETE /orders", "DELETE", o + "/orders", "", nil, "", 405, "method-not-allowed"},
		{"PUT a stock row", "PUT", i + "/stock/SKU-1", "", asJSON(), `{"on_hand":1}`, 405, "method-not-allowed"},
		{"POST a payment", "POST", p + "/payments/" + e.order, "", asJSON(), `{}`, 405, "method-not-allowed"},
		{"POST /healthz", "POST", s + "/healthz", "", nil, "", 405, "method-not-allowed"},
		{"PATCH the PSP's charges", "PATCH", s + "/psp/charges", "", asJSON("Authorization", "Bearer "+e.pspKey), `{}`, 404, "not-found"},
		{"an order as multipart", "POST", o + "/orders", "", h("Content-Type", "multipart/form-data; boundary=x", "Idempotency-Key", "h-m"), "--x--", 415, "unsupported-media-type"},
		{"an order as JSON Patch", "POST", o + "/orders", "", h("Content-Type", "application/json-patch+json", "Idempotency-Key", "h-m"), goodOrder, 415, "unsupported-media-type"},
		{"an order without a content type", "POST", o + "/orders", "", h("Idempotency-Key", "h-m"), goodOrder, 415, "unsupported-media-type"},
	}
}

func (e *env) viewerAttacks() []attack {
	v, cookie, evil := e.viewer, "ordersaga_viewer="+viewerToken, "http://evil.example"
	tok := "Bearer " + viewerToken
	return []attack{
		{"viewer: the API without a token", "GET", v + "/api/health", "", nil, "", 401, "unauthorized"},
		{"viewer: a wrong token", "GET", v + "/api/switches", "", h("Authorization", "Bearer "+adminToken+"x"), "", 401, "unauthorized"},
		{"viewer: a wrong token in the URL", "GET", v + "/?token=guess", "", nil, "", 401, "unauthorized"},
		{"viewer: arm a crash, foreign Host", "PUT", v + "/api/failpoints/order/" + point, "evil.example:8080",
			asJSON("Cookie", cookie, "Origin", evil), `{"action":"crash"}`, 403, "foreign-host"},
		{"viewer: wrong way, foreign Origin", "PUT", v + "/api/wrong-way/order", "", asJSON("Cookie", cookie, "Origin", evil), `{"on":["ack-before-commit"]}`, 403, "cross-origin"},
		{"viewer: release, a simple cross-site POST", "POST", v + "/api/failpoints/order/" + point + "/release", "",
			h("Content-Type", "text/plain", "Cookie", cookie, "Origin", evil), "", 403, "cross-origin"},
		{"viewer: a lab run, a key twice", "POST", v + "/api/lab/runs", "", asJSON("Authorization", tok), `{"experiment":"nope","experiment":"atomic-commit"}`, 400, "ambiguous-json"},
		{"viewer: a lab run, no such experiment", "POST", v + "/api/lab/runs", "", asJSON("Authorization", tok), `{"experiment":"rm -rf"}`, 422, "unprocessable"},
		{"viewer: an order, a key twice (the service's answer)", "POST", v + "/api/orders", "", asJSON("Authorization", tok, "Idempotency-Key", "h-v"),
			`{"customer_id":"a","customer_id":"b","items":[{"sku":"SKU-1","quantity":1}]}`, 400, "ambiguous-json"},
		{"viewer: an order, two Idempotency-Key lines", "POST", v + "/api/orders", "", asJSON("Authorization", tok, "Idempotency-Key", "h-1", "Idempotency-Key", "h-2"), goodOrder, 400, "idempotency-key-invalid"},
		{"viewer: cancel, no key (the service's answer)", "POST", v + "/api/orders/" + e.order + "/cancel", "", asJSON("Authorization", tok), ``, 400, "idempotency-key-missing"},
		{"viewer: the PSP switch, no such mode", "PUT", v + "/api/psp/switches", "", asJSON("Authorization", tok), `{"mode":"explode"}`, 422, "unprocessable"},
		{"viewer: DELETE /api/orders", "DELETE", v + "/api/orders", "", h("Authorization", tok), "", 405, "method-not-allowed"},
		{"viewer: no such service", "PUT", v + "/api/wrong-way/billing", "", asJSON("Authorization", tok), `{"on":[]}`, 404, "not-found"},
		{"viewer: a path trick", "GET", v + "/api/../api/health", "", h("Authorization", tok), "", 400, "path-not-clean"},
		{"viewer: a static path trick", "GET", v + "/static/../static/app.js", "", nil, "", 400, "path-not-clean"},
	}
}

// rawAttacks are requests net/http refuses itself, before any handler: a
// control character in a header value, a header line past
// MaxHeaderBytes. They get net/http's own 400 (text/plain, not a problem
// document: no code of ours runs), never a 5xx, and write nothing (the
// suite's snapshot covers them).
func (e *env) rawAttacks(t *testing.T) {
	addr := strings.TrimPrefix(e.s.Order.URL, "http://")
	for _, c := range []struct {
		name, header string
		want         int
	}{
		{"a NUL in the Idempotency-Key", "Idempotency-Key: a\x00b", 400},
		{"an escape in the Idempotency-Key", "Idempotency-Key: a\x1b[31mb", 400},
		{"a DEL in the Idempotency-Key", "Idempotency-Key: a\x7fb", 400},
		{"a bare CR in a header", "X-Note: a\rb", 400},
		{"a header line of 100 KiB", "X-Pad: " + strings.Repeat("p", 100<<10), 400},
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /orders HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n%s\r\nContent-Length: %d\r\n\r\n%s",
			addr, c.header, len(goodOrder), goodOrder)
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
		} else if resp.StatusCode != c.want {
			t.Errorf("%s: %d, want net/http's %d", c.name, resp.StatusCode, c.want)
		}
		conn.Close()
	}
}
