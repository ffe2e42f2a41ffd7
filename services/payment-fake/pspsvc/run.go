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
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/relmsg/ordersaga/migrations"
	"github.com/relmsg/ordersaga/pkg/failpoint"
	"github.com/relmsg/ordersaga/pkg/process"
	"github.com/relmsg/ordersaga/pkg/sqldb"
	"github.com/relmsg/ordersaga/pkg/tracing"
	"github.com/relmsg/ordersaga/pkg/web"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp"
)

// DefaultAddr is where the PSP listens by default; PSP_URL's default in
// the payment service points at it.
const DefaultAddr = ":8084"

// Run runs the PSP until ctx ends. It reads the shared settings it needs
// (HTTP_ADDR, MYSQL_DSN, MYSQL_CREATE_DATABASE, MYSQL_MAX_CONNS, DEMO_MODE,
// FAILPOINTS, LOG_LEVEL, INSTANCE_ID, SHUTDOWN_TIMEOUT); it has no broker.
func Run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	env := process.NewEnv(getenv)
	cfg := process.Load(env, "psp", DefaultAddr, "payment_service")
	if err := env.Err(); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	log := slog.New(tracing.LogHandler{Handler: slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: cfg.LogLevel})}).
		With("service", cfg.Name, "instance", cfg.InstanceID)
	log.Info("starting", "http_addr", cfg.HTTPAddr, "demo_mode", cfg.DemoMode, "instance", cfg.InstanceID)

	// Failpoints: a registry already in ctx (in-process tests) wins.
	fps, ok := failpoint.FromContext(ctx)
	if !ok {
		fps = failpoint.NewRegistry()
		ctx = failpoint.WithRegistry(ctx, fps)
	}
	if cfg.Failpoints != "" {
		if err := fps.ArmFromSpec(cfg.Failpoints); err != nil {
			return fmt.Errorf("FAILPOINTS: %w", err)
		}
		log.Warn("failpoints armed", "spec", cfg.Failpoints)
	}

	dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	db, err := sqldb.Open(dctx, sqldb.Config{DSN: cfg.MySQLDSN, CreateDatabase: cfg.CreateDatabase, MaxOpenConns: cfg.MySQLMaxConns})
	if err != nil {
		return err
	}
	defer db.Close()
	// The payment schema's migrations (the PSP's tables are among them);
	// the payment service applies the same set, under the same lock.
	fsys, err := migrations.For("payment")
	if err != nil {
		return err
	}
	if err := sqldb.Migrate(dctx, db, fsys, log); err != nil {
		return err
	}

	server := psp.NewServer(db, log)
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "service_info", Help: "1, labelled with the service and this instance (INSTANCE_ID).",
		ConstLabels: prometheus.Labels{"service": cfg.Name, "instance": cfg.InstanceID}})
	info.Set(1)
	metrics.MustRegister(info)

	mux := chi.NewRouter()
	mux.Use(middleware.Recoverer, tracing.Middleware)
	web.Health(mux, time.Now().UTC(), func(ctx context.Context) error { return db.PingContext(ctx) })
	mux.Handle("/metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{Registry: metrics}))
	mux.Mount("/psp", http.StripPrefix("/psp", psp.GuardSwitches(server.Handler(), cfg.DemoMode, log)))
	if cfg.DemoMode {
		h := http.StripPrefix("/debug/failpoints", fps.Handler())
		mux.Handle("/debug/failpoints", h)
		mux.Handle("/debug/failpoints/*", h)
	}
	mux.NotFound(func(w http.ResponseWriter, r *http.Request) {
		web.WriteJSON(w, http.StatusNotFound, map[string]string{"error": "no such endpoint"})
	})

	l, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.HTTPAddr, err)
	}
	log.Info("listening", "addr", l.Addr().String())
	err = web.Serve(ctx, l, mux, cfg.ShutdownTimeout)
	log.Info("stopped")
	return err
}
