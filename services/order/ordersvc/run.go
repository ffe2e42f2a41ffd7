// Package ordersvc is the order service's composition root. main calls Run;
// the end-to-end tests call it too, to run the service in-process.
package ordersvc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/endpoints"
	"github.com/relmsg/ordersaga/pkg/compose/process"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderapp"
	"github.com/relmsg/ordersaga/services/order/internal/orderbindings"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
	"github.com/relmsg/ordersaga/services/order/internal/orderhttp"
	"github.com/relmsg/ordersaga/services/order/internal/peerclient"
)

// settings are the order service's own configuration, beyond the shared
// process.Config.
type settings struct {
	Deadlines          order.Deadlines          // PARTICIPANT_DEADLINE, PAYMENT_DEADLINE(_MARGIN), PAYMENT_OUTCOME_WAIT, PAYMENT_OUTCOME_RECHECK
	DeadlineSweep      time.Duration            // DEADLINE_SWEEP_INTERVAL
	DeadlineBatch      int                      // DEADLINE_SWEEP_BATCH
	Reconcile          orderapp.ReconcileConfig // RECONCILE_GRACE, RECONCILE_REFUND_GRACE, RECONCILE_BATCH, RECONCILE_WINDOW, RECONCILE_FINISHED_BATCH
	ReconcileInterval  time.Duration            // RECONCILE_INTERVAL
	InventoryURL       string                   // INVENTORY_URL
	PaymentURL         string                   // PAYMENT_URL
	PeerTimeout        time.Duration            // PEER_TIMEOUT, per HTTP call to inventory or payment
	ReconcileScheduled bool                     // RECONCILE=off disables the periodic run (on demand still works)
}

// LogValue shows durations as "2m0s", not nanoseconds.
func (s settings) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("participant_deadline", s.Deadlines.Participant.String()),
		slog.String("payment_deadline", s.Deadlines.Payment.String()),
		slog.String("payment_deadline_margin", s.Deadlines.PaymentMargin.String()),
		slog.String("payment_outcome_wait", s.Deadlines.OutcomeWait.String()),
		slog.String("payment_outcome_recheck", s.Deadlines.Recheck.String()),
		slog.String("deadline_sweep_interval", s.DeadlineSweep.String()),
		slog.Int("deadline_sweep_batch", s.DeadlineBatch),
		slog.Bool("reconcile", s.ReconcileScheduled),
		slog.String("reconcile_interval", s.ReconcileInterval.String()),
		slog.String("reconcile_grace", s.Reconcile.Grace.String()),
		slog.String("reconcile_refund_grace", s.Reconcile.RefundGrace.String()),
		slog.Int("reconcile_batch", s.Reconcile.Batch),
		slog.String("reconcile_window", s.Reconcile.Window.String()),
		slog.Int("reconcile_finished_batch", s.Reconcile.FinishedBatch),
		slog.String("inventory_url", process.MaskURL(s.InventoryURL)),
		slog.String("payment_url", process.MaskURL(s.PaymentURL)),
		slog.String("peer_timeout", s.PeerTimeout.String()),
	)
}

func loadSettings(env *process.Env) (settings, error) {
	s := settings{
		Deadlines: order.Deadlines{
			Participant:   env.Duration("PARTICIPANT_DEADLINE", order.DefaultDeadlines.Participant),
			Payment:       env.Duration("PAYMENT_DEADLINE", order.DefaultDeadlines.Payment),
			PaymentMargin: env.Duration("PAYMENT_DEADLINE_MARGIN", order.DefaultDeadlines.PaymentMargin),
			OutcomeWait:   env.Duration("PAYMENT_OUTCOME_WAIT", order.DefaultDeadlines.OutcomeWait),
			Recheck:       env.Duration("PAYMENT_OUTCOME_RECHECK", order.DefaultDeadlines.Recheck),
		},
		DeadlineSweep: env.Duration("DEADLINE_SWEEP_INTERVAL", 5*time.Second),
		DeadlineBatch: env.Int("DEADLINE_SWEEP_BATCH", 100, 1, 1000),
		Reconcile: orderapp.ReconcileConfig{
			Grace:         env.Duration("RECONCILE_GRACE", orderapp.DefaultReconcile.Grace),
			RefundGrace:   env.Duration("RECONCILE_REFUND_GRACE", orderapp.DefaultReconcile.RefundGrace),
			Batch:         env.Int("RECONCILE_BATCH", orderapp.DefaultReconcile.Batch, 1, 1000),
			Window:        env.Duration("RECONCILE_WINDOW", orderapp.DefaultReconcile.Window),
			FinishedBatch: env.Int("RECONCILE_FINISHED_BATCH", orderapp.DefaultReconcile.FinishedBatch, 1, 10000),
		},
		ReconcileInterval:  env.Duration("RECONCILE_INTERVAL", time.Minute),
		ReconcileScheduled: env.String("RECONCILE", "on") != "off",
		InventoryURL:       env.String("INVENTORY_URL", "http://127.0.0.1:8082"),
		PaymentURL:         env.String("PAYMENT_URL", "http://127.0.0.1:8083"),
		PeerTimeout:        env.Duration("PEER_TIMEOUT", 5*time.Second),
	}
	var errs []error
	errs = append(errs, checkDeadlineOrder(env, s.Deadlines))
	if s.Reconcile.Window <= s.Reconcile.Grace {
		errs = append(errs, fmt.Errorf("RECONCILE_WINDOW=%s: must be longer than RECONCILE_GRACE=%s (finished orders are compared between the two)",
			s.Reconcile.Window, s.Reconcile.Grace))
	}
	// Each may list several instances, separated by commas (the order
	// service asks the next on a transport error).
	for key, v := range map[string]string{"INVENTORY_URL": s.InventoryURL, "PAYMENT_URL": s.PaymentURL} {
		if _, err := endpoints.Parse(v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", key, process.MaskURL(v), err))
		}
	}
	return s, errors.Join(errs...)
}

// checkDeadlineOrder enforces the order of the deadlines (order.Deadlines):
// the order asks payment only after payment's own deadline has been acted
// on by its sweep, and gives up before inventory's reservation lease ends.
// PAYMENT_SWEEP_INTERVAL and RESERVATION_TTL are the other services'
// settings, read here with their defaults from the same environment.
func checkDeadlineOrder(env *process.Env, d order.Deadlines) error {
	paymentSweep := env.Duration("PAYMENT_SWEEP_INTERVAL", 5*time.Second)
	lease := env.Duration("RESERVATION_TTL", 15*time.Minute)
	var errs []error
	if d.PaymentMargin <= paymentSweep {
		errs = append(errs, fmt.Errorf("PAYMENT_DEADLINE_MARGIN=%s: must be longer than PAYMENT_SWEEP_INTERVAL=%s, so that payment has acted on "+
			"its own PAYMENT_DEADLINE before the order asks", d.PaymentMargin, paymentSweep))
	}
	if d.GiveUp() >= lease {
		errs = append(errs, fmt.Errorf("PAYMENT_DEADLINE + PAYMENT_DEADLINE_MARGIN + PAYMENT_OUTCOME_WAIT = %s: must be below RESERVATION_TTL=%s, "+
			"so that the order gives up before inventory releases the stock on its own", d.GiveUp(), lease))
	}
	if d.Recheck > d.OutcomeWait {
		errs = append(errs, fmt.Errorf("PAYMENT_OUTCOME_RECHECK=%s: must not be longer than PAYMENT_OUTCOME_WAIT=%s", d.Recheck, d.OutcomeWait))
	}
	return errors.Join(errs...)
}

// Topology is every exchange and queue the service declares in namespace
// ns: what a test deletes when its stack is done (rabbit.Topology.Delete).
func Topology(ns rabbit.Namespace) rabbit.Topology { return orderbindings.Topology(ns) }

// Run runs the order service until ctx ends.
func Run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	env := process.NewEnv(getenv)
	cfg := process.Load(env, "order", ":8081", "order_service")
	own, serr := loadSettings(env)
	if err := errors.Join(env.Err(), serr); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}

	ctx, rt, err := process.Start(ctx, cfg, "order", orderbindings.Topology, stdout)
	if err != nil {
		return err
	}
	rt.Log.Info("order settings", "settings", own)
	if own.Reconcile.Grace >= own.Deadlines.Participant {
		rt.Log.Warn("RECONCILE_GRACE is not below PARTICIPANT_DEADLINE: orders stuck in pending_inventory are cancelled "+
			"by their deadline before the reconciler can repair them", "reconcile_grace", own.Reconcile.Grace.String(),
			"participant_deadline", own.Deadlines.Participant.String())
	}
	app := orderapp.New(rt.DB, rt.Outbox.Wake, rt.Log, orderapp.Config{
		Deadlines:  own.Deadlines,
		Reconcile:  own.Reconcile,
		Peers:      peerclient.New(own.InventoryURL, own.PaymentURL, cfg.AdminToken, own.PeerTimeout),
		Registerer: rt.Metrics,
	})
	rt.Metrics.MustRegister(app.Collector())

	app.WrongWay(cfg.WrongWay, rt.PublishNow)

	process.ConsumeWith(rt, orderbindings.Queue, orderbindings.ConsumerName, orderbindings.Handlers(app))

	// The persistent timer: deadlines live in orders.deadline_at, so a
	// restart resumes from the table (see orderapp/deadline.go). It and the
	// reconciler are singletons across instances (a database lease per
	// tick or run): a second one at once would ask the same peers about the
	// same orders, and the reconciler would write its audit rows twice.
	rt.Loop("deadline-sweep", func(ctx context.Context) error {
		return app.RunDeadlineSweep(ctx, own.DeadlineSweep, own.DeadlineBatch)
	})
	if own.ReconcileScheduled {
		rt.Loop("reconciler", func(ctx context.Context) error { return app.RunReconciler(ctx, own.ReconcileInterval) })
	} else {
		rt.Log.Warn("periodic reconciliation disabled (RECONCILE=off); POST /admin/reconciliation/run still works")
	}

	// The API's idempotency keys, kept IDEMPOTENCY_KEY_RETENTION.
	rt.RetainKeys("orders.idempotency_key", orderdb.ForgetCreateKeys)
	rt.RetainKeys("cancel_requests", orderdb.DeleteCancelKeys)
	router := rt.Router(orderhttp.AdminRoutes(app, rt.Log))
	orderhttp.Routes(router, app, rt.Log)
	return rt.Serve(ctx, router)
}
