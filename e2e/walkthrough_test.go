package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/relmsg/ordersaga/internal/sagatest"
	"github.com/relmsg/ordersaga/pkg/base/wire"
)

// curlCall is one curl command of docs/walkthrough.md.
type curlCall struct {
	line    string
	method  string
	url     *url.URL
	headers http.Header
	body    string
}

// walkthroughCalls reads every "$ curl" command of docs/walkthrough.md
// (continuation lines joined, shell quotes undone, the comment after it
// dropped).
func walkthroughCalls(t *testing.T) []curlCall {
	t.Helper()
	b, err := os.ReadFile("../docs/walkthrough.md")
	if err != nil {
		t.Fatal(err)
	}
	var calls []curlCall
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "$ curl ") {
			continue
		}
		for strings.HasSuffix(l, `\`) && i+1 < len(lines) {
			i++
			l = strings.TrimSuffix(l, `\`) + " " + strings.TrimSpace(lines[i])
		}
		words := shellWords(strings.TrimPrefix(l, "$ "))
		c := curlCall{line: l, method: http.MethodGet, headers: http.Header{}}
		for j := 1; j < len(words); j++ {
			switch w := words[j]; w {
			case "-s":
			case "-X":
				j++
				c.method = words[j]
			case "-H":
				j++
				k, v, _ := strings.Cut(words[j], ":")
				c.headers.Add(strings.TrimSpace(k), strings.TrimSpace(v))
			case "-d":
				j++
				c.body = words[j]
				if c.method == http.MethodGet {
					c.method = http.MethodPost
				}
			default:
				if c.url, err = url.Parse(w); err != nil || c.url.Host == "" {
					t.Fatalf("walkthrough: cannot read %q in %s", w, l)
				}
			}
		}
		calls = append(calls, c)
	}
	if len(calls) < 20 {
		t.Fatalf("walkthrough: found %d curl commands, expected its whole tour", len(calls))
	}
	return calls
}

// shellWords splits a command line as a shell would for these commands:
// single and double quotes, backslash escapes in double quotes, a comment
// from an unquoted #.
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	in, quote, started := false, byte(0), false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '\'':
			if c == '\'' {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case quote == '"':
			switch {
			case c == '"':
				quote = 0
			case c == '\\' && i+1 < len(s) && strings.IndexByte(`"\$`, s[i+1]) >= 0:
				i++
				cur.WriteByte(s[i])
			default:
				cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, started = c, true
		case c == '#' && !in:
			i = len(s)
		case c == ' ' || c == '\t':
			if started {
				out = append(out, cur.String())
				cur.Reset()
			}
			started = false
			in = false
			continue
		default:
			cur.WriteByte(c)
			started = true
		}
		in = started
	}
	if started {
		out = append(out, cur.String())
	}
	return out
}

var walkthroughPorts = map[string]string{"8081": "order", "8082": "inventory", "8083": "payment", "8084": "psp"}

var docOrderID = regexp.MustCompile(`(/orders/|/reservations/|/payments/|order_ref=)([0-9]+)`)

// replayWalkthrough sends every curl command of docs/walkthrough.md to the
// stack, in order, with the walkthrough's order ids replaced by the ones
// the stack gave (in order of first appearance; ids the walkthrough names
// without creating them, like 33, take the created ones in turn). The
// stack's contract checks hold each request and answer to
// docs/openapi.yaml; here, no answer may be a 5xx.
func replayWalkthrough(t *testing.T, s *sagatest.Saga) {
	t.Helper()
	services := map[string]*sagatest.Service{"order": s.Order, "inventory": s.Inventory, "payment": s.Payment, "psp": s.PSP}
	var created []string
	ids := map[string]string{}
	for _, c := range walkthroughCalls(t) {
		svc := services[walkthroughPorts[c.url.Port()]]
		if svc == nil {
			t.Fatalf("walkthrough: no service on port %s: %s", c.url.Port(), c.line)
		}
		target := docOrderID.ReplaceAllStringFunc(c.url.RequestURI(), func(m string) string {
			sub := docOrderID.FindStringSubmatch(m)
			real, ok := ids[sub[2]]
			if !ok && len(created) > 0 {
				real = created[len(ids)%len(created)]
				ids[sub[2]] = real
			}
			if real == "" {
				real = sub[2]
			}
			return sub[1] + real
		})
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		req, err := http.NewRequest(c.method, svc.URL+target, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header = c.headers.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("walkthrough %s: %v", c.line, err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			t.Errorf("walkthrough %s: %d %s", c.line, resp.StatusCode, answer)
		}
		if c.method == http.MethodPost && c.url.Path == "/orders" && resp.StatusCode == http.StatusAccepted {
			var o wire.Order
			if err := jsonDecode(answer, &o); err != nil {
				t.Fatalf("walkthrough %s: %v", c.line, err)
			}
			if !contains(created, o.OrderID) {
				created = append(created, o.OrderID)
				ids[fmt.Sprint(len(created))] = o.OrderID // the walkthrough's ids start at 1 on a new database
			}
		}
	}
}

func jsonDecode(b []byte, v any) error {
	return json.NewDecoder(bytes.NewReader(b)).Decode(v)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
