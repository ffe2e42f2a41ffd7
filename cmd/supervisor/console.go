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

// banner shows what runs where: every instance and node, then how to try
// it.
func (c *console) banner(cfg config) {
	var b strings.Builder
	b.WriteString("\n")
	for _, p := range table(cfg) {
		if p.Service == stack.Viewer.Name {
			continue
		}
		if p.Service == stack.Jaeger.Name {
			fmt.Fprintf(&b, "  %-15s %s/api/traces/<trace id>   spans over OTLP/HTTP on :%d (docs/tracing.md)\n", p.Name, p.URL, stack.OTLPPort)
			continue
		}
		fmt.Fprintf(&b, "  %-15s %s   log .run/%s.log\n", p.Name, p.URL, p.Name)
	}
	if cfg.instances > 1 {
		fmt.Fprintf(&b, "  %-15s one for every payment instance: its switches apply to every caller\n", "")
	}
	if stack.DemoMode(cfg.getenv) {
		fmt.Fprintf(&b, "  %-15s %s\n  %-15s the saga viewer and the failure lab in the browser (docs/viewer.md);\n  %-15s the link carries its token: keep it to yourself (docs/security.md)\n",
			"viewer", stack.ViewerURL(cfg.getenv), "", "")
	}
	if n := cfg.nodeConfigs(); len(n) > 0 {
		for _, node := range n {
			fmt.Fprintf(&b, "  %-15s amqp://127.0.0.1:%d   RabbitMQ node %s@localhost, data and log in .run/rabbit/%s/\n", node.Name, node.Port, node.Name, node.Name)
		}
	} else {
		fmt.Fprintf(&b, "  %-15s the machine's broker (RABBITMQ_HOST:RABBITMQ_PORT)\n", "rabbitmq")
	}
	b.WriteString(`  every service: /healthz /readyz /metrics
  what runs:     .run/stack.json (pids, URLs, ports, logs)

  Try:
    curl -s -X POST http://127.0.0.1:8081/orders \
      -H 'Content-Type: application/json' -H 'Idempotency-Key: demo-1' \
      -d '{"customer_id":"c-1","items":[{"sku":"SKU-1","quantity":2}]}'
    curl -s http://127.0.0.1:8081/orders/<order_id>
    curl -s http://127.0.0.1:8082/stock

`)
	c.print(c.stdout, b.String())
}
