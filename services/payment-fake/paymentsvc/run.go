// Package paymentsvc is the payment service's composition root. main calls
// Run; the end-to-end tests call it too, to run the service in-process.
package paymentsvc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/endpoints"
	"github.com/relmsg/ordersaga/pkg/base/tracing"
	"github.com/relmsg/ordersaga/pkg/compose/process"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentapp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentbindings"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymenthttp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp"
)

// Topology is every exchange and queue the service declares in namespace
// ns: what a test deletes when its stack is done (rabbit.Topology.Delete).
func Topology(ns rabbit.Namespace) rabbit.Topology { return paymentbindings.Topology(ns) }

// Run runs the payment service until ctx ends. The fake PSP is a process
// of its own (pspsvc, cmd/psp), reached through PSP_URL.
func Run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	env := process.NewEnv(getenv)
	cfg := process.Load(env, "payment-fake", ":8083", "payment_service")
	pcfg, perr := loadPSPConfig(env)
	scfg, serr := loadSagaConfig(env, pcfg.Timeout)
	if err := errors.Join(env.Err(), perr, serr); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}

	ctx, rt, err := process.Start(ctx, cfg, "payment", paymentbindings.Topology, stdout)
	if err != nil {
		return err
	}
	rt.Log.Info("psp client", "psp_url", process.MaskURL(pcfg.URL), "psp_timeout", pcfg.Timeout, "psp_token", pcfg.Token != "")
	rt.Log.Info("payment deadlines and sweep", "payment_deadline", scfg.App.ChargeDeadline,
		"refund_deadline", scfg.App.RefundDeadline, "sweep_interval", scfg.SweepInterval,
		"sweep_grace", scfg.App.Grace, "sweep_batch", scfg.App.SweepBatch, "cancel_settle", scfg.App.CancelSettle,
		"retry_base", scfg.App.Backoff.Base, "retry_cap", scfg.App.Backoff.Cap)

	// The one PSP every instance shares, reached only over HTTP; each call
	// is a client span of the message's process span.
	pspClient := psp.NewClient(pcfg.URL, &http.Client{Timeout: pcfg.Timeout,
		Transport: tracing.Transport(pspTransport(cfg), rt.Tracing.TracerProvider())}).WithToken(pcfg.Token)
	scfg.App.Wake = rt.Outbox.Wake
	app := paymentapp.New(rt.DB, pspClient, rt.Log, rt.Metrics, scfg.App)

	process.ConsumeWith(rt, paymentbindings.SagaQueue, paymentbindings.SagaConsumer, paymentbindings.SagaHandlers(app))
	process.ConsumeWith(rt, paymentbindings.PSPQueue, paymentbindings.PSPConsumer, paymentbindings.PSPHandlers(app))
	process.ConsumeWith(rt, paymentbindings.RefundQueue, paymentbindings.RefundConsumer, paymentbindings.RefundHandlers(app))

	// The persistent driver of every open charge and refund: a table scan,
	// not a timer in memory (see paymentapp/sweep.go). Concurrent on every
	// instance: each round claims its rows FOR UPDATE SKIP LOCKED and moves
	// them past their backoff, so no row is worked by two sweeps.
	rt.Loop("payment-sweep", func(ctx context.Context) error { return app.RunSweeper(ctx, scfg.SweepInterval) })

	router := rt.Router(paymenthttp.AdminRoutes(app, rt.Log))
	paymenthttp.Routes(router, app, endpoints.Must(pcfg.URL), process.AdminToken(cfg), rt.Log)
	return rt.Serve(ctx, router)
}

// pspTransport keeps a connection to the PSP open for every call a
// consumer can have in flight: a batch's calls go out concurrently
// (pkg/inbox/batch, callOut), and http.DefaultTransport keeps only two idle
// connections per host, so the others would be closed after each call and
// dialled again for the next batch (docs/performance.md, "Issue 25").
func pspTransport(cfg process.Config) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Charges and refunds are two consumers, each with its workers' batches.
	t.MaxIdleConnsPerHost = 2 * cfg.ConsumerWorkers * cfg.ConsumerBatch
	t.MaxIdleConns = t.MaxIdleConnsPerHost
	return t
}

// sagaConfig is the payment service's business timing: deadlines and the
// sweep that enforces them.
type sagaConfig struct {
	App           paymentapp.Config // deadlines, grace, backoff, batch
	SweepInterval time.Duration     // PAYMENT_SWEEP_INTERVAL
}

// pspTimeout (PSP_TIMEOUT) bounds one PSP call: the in-flight window of a
// cancelled order's charge must cover a charge and its status query.
func loadSagaConfig(env *process.Env, pspTimeout time.Duration) (sagaConfig, error) {
	c := sagaConfig{
		App: paymentapp.Config{
			ChargeDeadline: env.Duration("PAYMENT_DEADLINE", 10*time.Minute),
			RefundDeadline: env.Duration("REFUND_DEADLINE", 30*time.Minute),
			Grace:          env.Duration("PAYMENT_SWEEP_GRACE", 30*time.Second),
			CancelSettle:   env.Duration("PAYMENT_CANCEL_SETTLE", 15*time.Second),
			SweepBatch:     env.Int("PAYMENT_SWEEP_BATCH", 20, 1, 1000),
		},
		SweepInterval: env.Duration("PAYMENT_SWEEP_INTERVAL", 5*time.Second),
	}
	c.App.Backoff.Base = env.Duration("PAYMENT_RETRY_BASE", 30*time.Second)
	c.App.Backoff.Cap = env.Duration("PAYMENT_RETRY_CAP", 5*time.Minute)
	var errs []error
	if c.App.Backoff.Cap < c.App.Backoff.Base {
		errs = append(errs, fmt.Errorf("PAYMENT_RETRY_CAP=%s: must not be below PAYMENT_RETRY_BASE=%s", c.App.Backoff.Cap, c.App.Backoff.Base))
	}
	if c.App.CancelSettle < 2*pspTimeout {
		errs = append(errs, fmt.Errorf("PAYMENT_CANCEL_SETTLE=%s: must be at least twice PSP_TIMEOUT=%s (a charge sent before the cancel and its status query)",
			c.App.CancelSettle, pspTimeout))
	}
	return c, errors.Join(errs...)
}

// pspConfig is how the payment app reaches the PSP.
type pspConfig struct {
	URL     string        // PSP_URL: one base URL or several separated by commas
	Timeout time.Duration // PSP_TIMEOUT, per HTTP call
	Token   string        // PSP_TOKEN: the key the PSP wants for charges and refunds
}

// DefaultPSPURL is where the PSP process (cmd/psp) listens by default.
const DefaultPSPURL = "http://127.0.0.1:8084/psp"

// maxPSPTimeout keeps a charge and its status query (two calls, each up to
// PSP_TIMEOUT) inside the consumer's 30 s handler timeout (pkg/rabbit), so
// an unknown outcome is always followed by its status query.
const maxPSPTimeout = 12 * time.Second

func loadPSPConfig(env *process.Env) (pspConfig, error) {
	c := pspConfig{
		URL:     env.String("PSP_URL", DefaultPSPURL),
		Timeout: env.Duration("PSP_TIMEOUT", 5*time.Second),
		Token:   env.String("PSP_TOKEN", ""),
	}
	var errs []error
	if c.Timeout > maxPSPTimeout {
		errs = append(errs, fmt.Errorf("PSP_TIMEOUT=%s: at most %s (a charge and its status query must fit in the 30 s handler timeout)", c.Timeout, maxPSPTimeout))
	}
	if _, err := endpoints.Parse(c.URL); err != nil {
		errs = append(errs, fmt.Errorf("PSP_URL=%q: want http://host:port/path, or several separated by commas: %w", process.MaskURL(c.URL), err))
	}
	return c, errors.Join(errs...)
}
