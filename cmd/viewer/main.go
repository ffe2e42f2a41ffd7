// Command viewer serves the saga viewer (internal/viewer): a web page that
// draws each order's journey across the three services, runs the failure
// lab, flips the demo switches and shows the stack's health. It drives a
// running stack (scripts/up.sh or docker compose) over HTTP only, like the
// terminal lab, and exists for demo stacks only.
//
//	DEMO_MODE=true go run ./cmd/viewer          # http://127.0.0.1:8080/
//
// Environment: VIEWER_ADDR (127.0.0.1:8080), ORDER_URL, INVENTORY_URL,
// PAYMENT_URL (the ports of scripts/up.sh), PSP_URL (the PSP process, 8084),
// STACK_RUN_DIR (.run: the instances of scripts/up.sh -n N; the viewer keeps
// its finished lab runs in its lab-runs directory), LAB_AMQP_URL (the lab publishes
// duplicates through the broker), VIEWER_TOKEN (what the page's API wants;
// ADMIN_TOKEN when unset, else one made at start and logged with the URL
// to open), ADMIN_TOKEN (sent to the services), ALLOWED_HOSTS (Host names
// besides this machine's), DEMO_MODE (must be true), LOG_LEVEL, JAEGER_URL
// (Jaeger's query API: each order's trace is drawn from it; scripts/up.sh
// --tracing sets it) and JAEGER_UI_URL (Jaeger's own UI, linked from the
// page: docker compose sets it).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/relmsg/ordersaga/internal/lab"
	"github.com/relmsg/ordersaga/internal/viewer"
	"github.com/relmsg/ordersaga/pkg/base/program"
	"github.com/relmsg/ordersaga/pkg/base/web"
	"github.com/relmsg/ordersaga/pkg/compose/process"
)

func main() {
	program.Main("viewer", func(ctx context.Context) error { return run(ctx, os.Args[1:], os.Getenv, os.Stdout) })
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	env := process.NewEnv(getenv)
	fs := flag.NewFlagSet("viewer", flag.ContinueOnError)
	addr := fs.String("addr", env.String("VIEWER_ADDR", "127.0.0.1:8080"), "listen address (VIEWER_ADDR)")
	patience := fs.Duration("patience", 2*time.Minute, "how long a lab experiment waits for recovery")
	if err := fs.Parse(args); err != nil {
		return err
	}
	demo := env.Bool("DEMO_MODE", false)
	hosts := env.List("ALLOWED_HOSTS")
	var level slog.Level
	if err := level.UnmarshalText([]byte(env.String("LOG_LEVEL", "info"))); err != nil {
		return fmt.Errorf("LOG_LEVEL: want debug, info, warn or error")
	}
	if err := env.Err(); err != nil {
		return err
	}
	if !demo {
		// Like /debug/failpoints and the PSP switches, the viewer (which
		// arms failpoints and crashes services) is for demo stacks only.
		return errors.New("the viewer drives the failure lab: it runs on demo stacks only (set DEMO_MODE=true, as scripts/up.sh does)")
	}
	log := slog.New(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: level})).With("service", "viewer")

	target := lab.NewLiveTarget(getenv)
	defer target.Close()
	token, tokenFrom := env.String("VIEWER_TOKEN", getenv("ADMIN_TOKEN")), "VIEWER_TOKEN"
	switch {
	case token == "":
		tokenFrom = "made at start"
	case getenv("VIEWER_TOKEN") == "":
		tokenFrom = "ADMIN_TOKEN"
	}
	runsDir := filepath.Join(env.String("STACK_RUN_DIR", ".run"), "lab-runs")
	srv := viewer.New(viewer.Config{Target: target, Token: token, AdminToken: getenv("ADMIN_TOKEN"),
		AllowedHosts: hosts, Log: log, Patience: *patience, RunsDir: runsDir,
		JaegerURL: strings.TrimRight(getenv("JAEGER_URL"), "/"), JaegerUIURL: strings.TrimRight(getenv("JAEGER_UI_URL"), "/")})
	defer srv.Close()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s (VIEWER_ADDR): %w", *addr, err)
	}
	urls := map[string]string{}
	for _, svc := range lab.Services {
		urls[svc] = target.URL(svc)
	}
	// A token made here is told once, in the URL to open (as a notebook
	// server does); a configured one is not repeated in the log.
	open := "http://" + ln.Addr().String() + "/"
	if token == "" {
		open += "?token=" + srv.Token()
	}
	log.Info("saga viewer started", "url", open, "token", tokenFrom, "services", urls,
		"amqp", process.MaskURL(env.String("LAB_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")),
		"admin_token", getenv("ADMIN_TOKEN") != "", "allowed_hosts", hosts, "lab_runs", runsDir)
	return web.Serve(ctx, ln, srv.Handler(), 5*time.Second)
}
