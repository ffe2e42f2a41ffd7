// Package inventorysvc is the inventory service's composition root. main
// calls Run; the end-to-end tests call it too, to run the service in-process.
package inventorysvc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/relmsg/ordersaga/pkg/compose/process"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventoryapp"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorybindings"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorydb"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventoryhttp"
)

// settings are the inventory service's own configuration, beyond the
// shared process.Config.
type settings struct {
	ReservationTTL   time.Duration // RESERVATION_TTL: how long a reservation holds its stock
	SweepInterval    time.Duration // RESERVATION_SWEEP_INTERVAL: how often the lease sweep runs
	SweepBatch       int           // RESERVATION_SWEEP_BATCH: reservations per sweep round
	GapDeadline      time.Duration // GAP_DEADLINE: how long an event gap may stay open before it is overdue
	GapCheckInterval time.Duration // GAP_CHECK_INTERVAL: how often overdue gaps are looked for
}

// LogValue shows the durations as "15m0s", not nanoseconds.
func (s settings) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("reservation_ttl", s.ReservationTTL.String()),
		slog.String("reservation_sweep_interval", s.SweepInterval.String()),
		slog.Int("reservation_sweep_batch", s.SweepBatch),
		slog.String("gap_deadline", s.GapDeadline.String()),
		slog.String("gap_check_interval", s.GapCheckInterval.String()),
	)
}

func loadSettings(env *process.Env) settings {
	return settings{
		ReservationTTL:   env.Duration("RESERVATION_TTL", inventoryapp.DefaultLease),
		SweepInterval:    env.Duration("RESERVATION_SWEEP_INTERVAL", 5*time.Second),
		SweepBatch:       env.Int("RESERVATION_SWEEP_BATCH", 100, 1, 1000),
		GapDeadline:      env.Duration("GAP_DEADLINE", inventoryapp.DefaultGapDeadline),
		GapCheckInterval: env.Duration("GAP_CHECK_INTERVAL", 30*time.Second),
	}
}

// Topology is every exchange and queue the service declares in namespace
// ns, demo mode's included: what a test deletes when its stack is done
// (rabbit.Topology.Delete).
func Topology(ns rabbit.Namespace) rabbit.Topology { return inventorybindings.DemoTopology(ns) }

// Run runs the inventory service until ctx ends.
func Run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	env := process.NewEnv(getenv)
	cfg := process.Load(env, "inventory", ":8082", "inventory_service")
	own := loadSettings(env)
	if err := env.Err(); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}

	topology := inventorybindings.Topology
	if cfg.DemoMode {
		topology = inventorybindings.DemoTopology // the lab's goods-received queue
	}
	ctx, rt, err := process.Start(ctx, cfg, "inventory", topology, stdout)
	if err != nil {
		return err
	}
	rt.Log.Info("inventory settings", "settings", own)
	app := inventoryapp.New(rt.DB, rt.Log, inventoryapp.Config{
		Consumer:    inventorybindings.ConsumerName,
		Lease:       own.ReservationTTL,
		GapDeadline: own.GapDeadline,
		Wake:        rt.Outbox.Wake,
		WrongWay:    cfg.WrongWay,
	})

	process.ConsumeWith(rt, inventorybindings.Queue, inventorybindings.ConsumerName, inventorybindings.Handlers(app))
	if cfg.DemoMode { // the lab's delta consumer (inventorybindings/demo.go): deltas are never batched
		receipts := rt.InboxConfig(inventorybindings.ReceiptsConsumerName)
		receipts.Handlers = inventorybindings.ReceiptHandlers(app)
		rt.Consume(inventorybindings.ReceiptsQueue, inbox.NewConsumer(receipts), nil)
	}

	// Both run concurrently on every instance: the lease sweep releases
	// each reservation by compare-and-set (one sweeper wins, the others
	// change nothing), and the gap check stamps alerted_at once per gap
	// (WHERE alerted_at IS NULL). A second sweeper costs one cheap query.
	rt.Loop("lease-sweep", func(ctx context.Context) error {
		return app.RunLeaseSweep(ctx, own.SweepInterval, own.SweepBatch)
	})
	rt.Loop("gap-check", func(ctx context.Context) error {
		return app.RunGapCheck(ctx, own.GapCheckInterval)
	})
	rt.Metrics.MustRegister(app.Collector())

	// The receipts' idempotency keys, kept IDEMPOTENCY_KEY_RETENTION.
	rt.RetainKeys("stock_receipts", inventorydb.DeleteReceiptKeys)
	router := rt.Router(inventoryhttp.AdminRoutes(app, rt.Log))
	inventoryhttp.Routes(router, app, rt.Log)
	if cfg.DemoMode {
		// sync-reserve's synchronous call (pkg/aids/wrongway), behind ADMIN_TOKEN
		// when set, as every /debug route.
		inventoryhttp.DemoRoutes(router.With(process.DebugToken(cfg)), app, rt.Log)
	}
	return rt.Serve(ctx, router)
}
