// Package pspsvc is the fake PSP's composition root: the payment provider
// as a process of its own (port 8084), which every payment instance calls
// over HTTP (PSP_URL). cmd/psp's main calls Run; the end-to-end tests call
// it too, to run the PSP in-process.
//
// One PSP for every payment instance: its fault switches (PUT
// /psp/switches) and its failpoints are this process's, so a switch set
// once applies to every caller, as a real provider's outage would.
//
// Its books are the tables psp_charges and psp_refunds, which live in the
// payment schema (migrations/payment) and which only this process touches
// (package psp): durable, because a PSP never forgets a charge (the lab
// kills processes; the idempotency key is the tables' unique key), and in
// the payment schema rather than a schema of their own so that the stack
// needs no extra database user and grants. The payment service never reads
// them: it asks over HTTP, as it would ask a real provider.
package pspsvc

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/relmsg/ordersaga/pkg/process"
	"github.com/relmsg/ordersaga/pkg/web"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp"
)

// DefaultAddr is where the PSP listens by default; PSP_URL's default in
// the payment service points at it.
const DefaultAddr = ":8084"

// Run runs the PSP until ctx ends. It reads the shared settings it needs
// (HTTP_ADDR, MYSQL_DSN, MYSQL_CREATE_DATABASE, MYSQL_MAX_CONNS, DEMO_MODE,
// ADMIN_TOKEN, ALLOWED_HOSTS, FAILPOINTS, LOG_LEVEL, INSTANCE_ID,
// SHUTDOWN_TIMEOUT) and its own PSP_TOKEN; it has no broker.
func Run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	env := process.NewEnv(getenv)
	cfg := process.Load(env, "psp", DefaultAddr, "payment_service")
	// PSP_TOKEN: the key charges and refunds need (the payment service's).
	token := env.String("PSP_TOKEN", "")
	if err := env.Err(); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	log := process.NewLogger(cfg, stdout)
	log.Info("starting", "http_addr", cfg.HTTPAddr, "demo_mode", cfg.DemoMode, "psp_token", token != "",
		"admin_token", cfg.AdminToken != "", "allowed_hosts", cfg.AllowedHosts)
	ctx, fps, err := process.WithFailpoints(ctx, cfg, log)
	if err != nil {
		return err
	}
	// The payment schema's migrations (the PSP's tables are among them);
	// the payment service applies the same set, under the same lock.
	db, err := process.OpenDB(ctx, cfg, "payment", log)
	if err != nil {
		return err
	}
	defer db.Close()

	server := psp.NewServer(db, log)
	mux := process.BaseRouter(cfg, time.Now().UTC(), db.PingContext, process.NewMetrics(cfg), fps)
	access := psp.Access{Demo: cfg.DemoMode, AdminToken: cfg.AdminToken, Token: token}
	mux.Mount("/psp", http.StripPrefix("/psp", psp.Guard(server.Handler(), access, log)))

	l, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.HTTPAddr, err)
	}
	log.Info("listening", "addr", l.Addr().String())
	err = web.Serve(ctx, l, mux, cfg.ShutdownTimeout)
	log.Info("stopped")
	return err
}
