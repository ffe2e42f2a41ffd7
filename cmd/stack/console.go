package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/relmsg/ordersaga/internal/stack"
)

// console is where the stack reports: progress lines "[up] ..." on stderr,
// the services' logs and the banner on stdout. A detached supervisor's
// stderr is .run/stack.log.
type console struct {
	mu             sync.Mutex
	stdout, stderr io.Writer
}

func newConsole(stdout, stderr io.Writer) *console {
	return &console{stdout: stdout, stderr: stderr}
}

func (c *console) say(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.stderr, "[up] "+format+"\n", args...)
}

func (c *console) print(w io.Writer, s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	io.WriteString(w, s)
}

// tail shows the last lines of a log.
func (c *console) tail(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	lines = lines[max(0, len(lines)-30):]
	c.say("last lines of .run/%s:", filepath.Base(path))
	c.print(c.stderr, "    "+strings.Join(lines, "\n    ")+"\n")
}

// follow copies the lines written to the file at path to w, each after
// prefix, until ctx ends; then it copies what is left and returns.
func (c *console) follow(ctx context.Context, path, prefix string, w io.Writer) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	r := bufio.NewReader(f)
	partial, draining := "", false
	for {
		line, err := r.ReadString('\n')
		partial += line
		if err == nil {
			c.print(w, prefix+partial)
			partial = ""
			continue
		}
		if draining { // at the end of what there was to copy
			if partial != "" {
				c.print(w, prefix+partial+"\n")
			}
			return
		}
		select {
		case <-ctx.Done():
			draining = true
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *console) banner(getenv func(string) string) {
	var b strings.Builder
	b.WriteString("\n")
	for _, svc := range stack.Services {
		fmt.Fprintf(&b, "  %-13s %s   log .run/%s.log\n", svc.Name, svc.URL(), svc.Name)
	}
	payment, _ := stack.Lookup("payment-fake")
	fmt.Fprintf(&b, "  %-13s %s/psp\n", "fake PSP", payment.URL())
	if stack.DemoMode(getenv) {
		fmt.Fprintf(&b, "  %-13s %s/   the saga viewer and the failure lab in the browser (docs/viewer.md)\n", "viewer", stack.Viewer.URL())
	}
	b.WriteString(`  every service: /healthz /readyz /metrics
  what runs:     .run/stack.json (pids, URLs, logs)

  Try:
    curl -s -X POST http://127.0.0.1:8081/orders \
      -H 'Content-Type: application/json' -H 'Idempotency-Key: demo-1' \
      -d '{"customer_id":"c-1","items":[{"sku":"SKU-1","quantity":2}]}'
    curl -s http://127.0.0.1:8081/orders/<order_id>
    curl -s http://127.0.0.1:8082/stock

`)
	c.print(c.stdout, b.String())
}
