package process

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/relmsg/ordersaga/migrations"
	"github.com/relmsg/ordersaga/pkg/failpoint"
	"github.com/relmsg/ordersaga/pkg/sqldb"
	"github.com/relmsg/ordersaga/pkg/tracing"
	"github.com/relmsg/ordersaga/pkg/web"
)

// The pieces below are what every process of the stack has, a service
// (Start) or the fake PSP (pspsvc), which has no broker.

// NewLogger returns the JSON logger: a record logged with a context that
// carries a traceparent gets its trace_id, so one order can be followed
// across services, and every line names the service and the instance
// (with several instances of a service, a line says which one logged it).
func NewLogger(cfg Config, stdout io.Writer) *slog.Logger {
	return slog.New(tracing.LogHandler{Handler: slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: cfg.LogLevel})}).
		With("service", cfg.Name, "instance", cfg.InstanceID)
}

// NewMetrics returns a registry with the Go and process collectors and
// service_info{service, instance}.
func NewMetrics(cfg Config) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "service_info", Help: "1, labelled with the service and this instance (INSTANCE_ID).",
		ConstLabels: prometheus.Labels{"service": cfg.Name, "instance": cfg.InstanceID}})
	info.Set(1)
	reg.MustRegister(info)
	return reg
}

// WithFailpoints returns the failpoint registry of ctx (in-process tests
// put one there) or a fresh one, added to the returned context, armed from
// FAILPOINTS either way.
func WithFailpoints(ctx context.Context, cfg Config, log *slog.Logger) (context.Context, *failpoint.Registry, error) {
	reg, ok := failpoint.FromContext(ctx)
	if !ok {
		reg = failpoint.NewRegistry()
		ctx = failpoint.WithRegistry(ctx, reg)
	}
	if cfg.Failpoints != "" {
		if err := reg.ArmFromSpec(cfg.Failpoints); err != nil {
			return ctx, nil, fmt.Errorf("FAILPOINTS: %w", err)
		}
		log.Warn("failpoints armed", "spec", cfg.Failpoints)
	}
	return ctx, reg, nil
}

// OpenDB opens the database and applies the migrations of migrationsDir
// (the folder under migrations/), within a minute.
func OpenDB(ctx context.Context, cfg Config, migrationsDir string, log *slog.Logger) (*sqlx.DB, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	db, err := sqldb.Open(ctx, sqldb.Config{DSN: cfg.MySQLDSN, CreateDatabase: cfg.CreateDatabase, MaxOpenConns: cfg.MySQLMaxConns})
	if err != nil {
		return nil, err
	}
	fsys, err := migrations.For(migrationsDir)
	if err == nil {
		err = sqldb.Migrate(ctx, db, fsys, log)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// BaseRouter returns a router with what every process serves: /healthz,
// /readyz (ready), /metrics, in demo mode /debug/failpoints, and problem
// documents for an unknown path or method. Every route is behind web.Guard
// (this machine's Host or ALLOWED_HOSTS, no state change from another
// site's page, clean paths); /debug wants ADMIN_TOKEN when one is set.
func BaseRouter(cfg Config, started time.Time, ready func(context.Context) error, metrics *prometheus.Registry,
	failpoints *failpoint.Registry) chi.Router {
	mux := chi.NewRouter()
	mux.Use(middleware.Recoverer, web.Guard{Hosts: cfg.AllowedHosts}.Wrap, tracing.Middleware)
	web.Health(mux, started, ready)
	mux.Handle("/metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{Registry: metrics}))
	if cfg.DemoMode {
		h := DebugToken(cfg)(http.StripPrefix("/debug/failpoints", failpoints.Handler()))
		mux.Handle("/debug/failpoints", h)
		mux.Handle("/debug/failpoints/*", h)
	}
	mux.NotFound(web.NotFound)
	mux.MethodNotAllowed(web.MethodNotAllowed)
	return mux
}

// DebugToken guards the demo mode's /debug endpoints (failpoints, wrong
// ways, profiles, the PSP's switch): with ADMIN_TOKEN set they want it, as
// /admin does; without one they are open, as demo mode on a laptop is
// (docs/security.md).
func DebugToken(cfg Config) func(http.Handler) http.Handler {
	return web.RequireToken(cfg.AdminToken, true, "ADMIN_TOKEN")
}

// AdminToken guards /admin: ADMIN_TOKEN when set; without one, open in
// demo mode and refused (403) otherwise.
func AdminToken(cfg Config) func(http.Handler) http.Handler {
	return web.RequireToken(cfg.AdminToken, cfg.DemoMode, "ADMIN_TOKEN")
}
