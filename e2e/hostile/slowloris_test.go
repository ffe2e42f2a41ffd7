package hostile_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// idleConns is how many connections the slowloris check holds.
const idleConns = 300

// slowloris opens idleConns connections to base, each with half a request
// (a request line and one header, never the blank line that ends them),
// then asks /healthz: it must answer while every one of them is still
// held. Each connection has its own goroutine on the server and is cut
// off after web.Serve's ReadHeaderTimeout, so they cannot starve it.
func slowloris(t *testing.T, base string) {
	addr := strings.TrimPrefix(base, "http://")
	conns := make([]net.Conn, 0, idleConns)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range idleConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", len(conns)+1, err)
		}
		conns = append(conns, c)
		if _, err := fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n", addr); err != nil {
			t.Fatal(err)
		}
	}
	client := &http.Client{Timeout: 30 * time.Second} // a bound for a hung server, not a measure
	resp, err := client.Get(base + "/healthz")
	if err != nil {
		t.Fatalf("/healthz with %d connections held: %v", idleConns, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz with %d connections held: %d", idleConns, resp.StatusCode)
	}
	// Still held when /healthz answered: a read finds nothing to read yet
	// (a deadline now), not the end of a connection the server closed.
	open := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now())
		if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
			open++
		}
	}
	if open != idleConns {
		t.Errorf("%d of %d idle connections were still open when /healthz answered, want all", open, idleConns)
	}
}
