// Command lab runs the failure lab's experiments against a running stack
// (scripts/up.sh or docker compose) and prints the evidence: the rows before
// the fault, after it and after recovery, the checks, and a verdict naming
// the constraint or recovery job that held. scripts/experiment.sh runs it.
//
//	go run ./cmd/lab list
//	go run ./cmd/lab duplicate-window
//	go run ./cmd/lab -wrong-way atomic-commit
//	go run ./cmd/lab all
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/relmsg/ordersaga/internal/lab"
	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/process"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "lab:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("lab", flag.ContinueOnError)
	wrong := fs.Bool("wrong-way", false, "run the experiment with its wrong-way switch on, to see the anomaly")
	patience := fs.Duration("patience", 2*time.Minute, "how long to wait for recovery")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: scripts/experiment.sh [-wrong-way] <experiment>|list|all")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("name one experiment (or list, or all)")
	}
	name := fs.Arg(0)
	if name == "list" {
		for _, s := range lab.Scenarios {
			ww := ""
			if s.WrongWay != "" {
				ww = "  (-wrong-way: " + string(s.WrongWay) + ")"
			}
			fmt.Fprintf(out, "%-21s %s -> %s%s\n", s.Name, s.Window, s.Holds, ww)
		}
		return nil
	}
	var todo []lab.Scenario
	if name == "all" {
		todo = lab.Scenarios
	} else {
		s, ok := lab.Find(name)
		if !ok {
			return fmt.Errorf("no experiment %q (try: scripts/experiment.sh list)", name)
		}
		todo = []lab.Scenario{s}
	}

	t := newLiveTarget(getenv)
	for _, svc := range []string{"order", "inventory", "payment"} {
		if err := t.ready(ctx, svc); err != nil {
			return fmt.Errorf("%s at %s is not ready (start the stack with scripts/up.sh or docker compose up): %w", svc, t.URL(svc), err)
		}
	}
	defer t.close()
	l := lab.New(t, getenv("ADMIN_TOKEN"), out)
	l.Patience = *patience
	failed := 0
	for _, s := range todo {
		if *wrong && s.WrongWay == "" {
			fmt.Fprintf(out, "\n=== %s has no wrong-way switch; skipped\n", s.Name)
			continue
		}
		rep := l.Run(ctx, s, *wrong)
		rep.Print(out)
		if !rep.Passed() {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d experiment(s) did not pass", failed)
	}
	return nil
}

// liveTarget is a stack started by scripts/up.sh or docker compose.
type liveTarget struct {
	urls    map[string]string
	amqpURL string
	client  http.Client

	mu      sync.Mutex
	started map[string]string // service -> started_at before a crash
	conn    *rabbit.Conn
	stop    context.CancelFunc
}

func newLiveTarget(getenv func(string) string) *liveTarget {
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	return &liveTarget{
		urls: map[string]string{
			"order":     strings.TrimRight(env("ORDER_URL", "http://127.0.0.1:8081"), "/"),
			"inventory": strings.TrimRight(env("INVENTORY_URL", "http://127.0.0.1:8082"), "/"),
			"payment":   strings.TrimRight(env("PAYMENT_URL", "http://127.0.0.1:8083"), "/"),
		},
		amqpURL: env("LAB_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
		client:  http.Client{Timeout: 3 * time.Second},
		started: map[string]string{},
	}
}

func (t *liveTarget) URL(svc string) string { return t.urls[svc] }

func (t *liveTarget) ready(ctx context.Context, svc string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, t.URL(svc)+"/readyz", nil)
	resp, err := t.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz answered %d", resp.StatusCode)
	}
	return nil
}

func (t *liveTarget) startedAt(ctx context.Context, svc string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, t.URL(svc)+"/healthz", nil)
	resp, err := t.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var h struct {
		StartedAt string `json:"started_at"`
	}
	err = json.NewDecoder(resp.Body).Decode(&h)
	return h.StartedAt, err
}

// Publish sends an event to saga.events through the broker's AMQP port.
func (t *liveTarget) Publish(ctx context.Context, e events.Envelope) error {
	t.mu.Lock()
	if t.conn == nil {
		topo := rabbit.Topology{Exchange: rabbit.Namespace("").Exchange(), DeadLetterExchange: rabbit.Namespace("").DeadLetterExchange()}
		t.conn = rabbit.New(t.amqpURL, topo, slog.New(slog.NewTextHandler(io.Discard, nil)))
		cctx, cancel := context.WithCancel(context.Background())
		t.stop = cancel
		go t.conn.Run(cctx)
	}
	conn := t.conn
	t.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := conn.WaitConnected(wctx); err != nil {
		return fmt.Errorf("broker at %s (set LAB_AMQP_URL): %w", process.MaskURL(t.amqpURL), err)
	}
	pub := conn.NewPublisher()
	defer pub.Close()
	return pub.Publish(ctx, []rabbit.Message{rabbit.FromEnvelope(rabbit.Namespace("").Exchange(), e)}, 5*time.Second)[0]
}

func (t *liveTarget) close() {
	if t.stop != nil {
		t.stop()
	}
}

// PrepareCrash notes the service's start time: AwaitRestart then knows the
// process really died and a new one took over.
func (t *liveTarget) PrepareCrash(ctx context.Context, svc string) error {
	s, err := t.startedAt(ctx, svc)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.started[svc] = s
	t.mu.Unlock()
	return nil
}

// AwaitRestart waits until the supervisor (scripts/up.sh's cmd/stack, or
// docker compose's restart policy) has brought a new process up.
func (t *liveTarget) AwaitRestart(ctx context.Context, svc string) error {
	t.mu.Lock()
	before := t.started[svc]
	t.mu.Unlock()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if s, err := t.startedAt(ctx, svc); err == nil && s != before && t.ready(ctx, svc) == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not come back within 90s after the crash (is it supervised? scripts/up.sh and docker compose restart it)", svc)
}
