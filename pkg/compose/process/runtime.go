package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/aids/wrongway"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/instance"
	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/base/tracing"
	"github.com/relmsg/ordersaga/pkg/base/web"
	"github.com/relmsg/ordersaga/pkg/compose/admin"
	"github.com/relmsg/ordersaga/pkg/deadletter"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/inbox/batch"
	"github.com/relmsg/ordersaga/pkg/ordering"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/retention"
)

// Runtime holds a service's infrastructure.
type Runtime struct {
	Cfg        Config
	Log        *slog.Logger
	DB         *sqlx.DB
	NS         rabbit.Namespace
	Broker     *rabbit.Conn
	Outbox     *outbox.Dispatcher
	Metrics    *prometheus.Registry
	Inbox      *inbox.Metrics
	Batch      *batch.Metrics
	Failpoints *failpoint.Registry
	// Tracing is the process's tracer provider (pkg/base/tracing); Serve shuts
	// it down last, sending the spans still waiting.
	Tracing *tracing.Provider
	// Journal keeps the latest log records about each event, order and
	// claim, for /debug/journal (demo mode only; nil otherwise).
	Journal *Journal

	consumers []consumer
	loops     []loop
	started   time.Time
	redrive   *rabbit.Publisher // the admin redrive's confirming publisher
	cleaner   *retention.Cleaner
}

type consumer struct {
	queue string
	c     *inbox.Consumer
	one   rabbit.Handler
	batch rabbit.BatchHandler // nil: one delivery at a time only
}

type loop struct {
	name string
	run  func(ctx context.Context) error
}

// Start builds the runtime: logger, database (opened, migrated), broker
// connection (started by Serve), outbox dispatcher, metrics and the
// failpoint registry. The returned context carries that registry.
// migrationsDir is the service's folder under migrations/.
func Start(ctx context.Context, cfg Config, migrationsDir string, topology func(rabbit.Namespace) rabbit.Topology, stdout io.Writer) (context.Context, *Runtime, error) {
	log := NewLogger(cfg, stdout)
	var journal *Journal
	if cfg.DemoMode {
		journal = NewJournal(0)
		log = slog.New(journal.Handler(log.Handler()))
	}
	log.Info("starting", "config", cfg.Masked())
	// The rows that record who acted read the instance from the context.
	ctx = instance.With(ctx, cfg.InstanceID)

	r := &Runtime{Cfg: cfg, Log: log, Journal: journal, NS: rabbit.Namespace(cfg.AMQPNamespace), Metrics: NewMetrics(cfg), started: time.Now().UTC()}
	ctx, fps, err := WithFailpoints(ctx, cfg, log)
	if err != nil {
		return ctx, nil, err
	}
	r.Failpoints = fps
	if ctx, r.Tracing, err = StartTracing(ctx, cfg, log); err != nil {
		return ctx, nil, err
	}
	db, err := OpenDB(ctx, cfg, migrationsDir, log)
	if err != nil {
		return ctx, nil, err
	}
	r.DB = db

	r.Broker = rabbit.New(cfg.AMQPURL, topology(r.NS), log)
	r.Outbox = outbox.New(db, outbox.Config{
		Exchange:     r.NS.Exchange(),
		NewPublisher: outbox.RabbitPublishers(r.Broker),
		Workers:      cfg.OutboxWorkers,
		BatchSize:    cfg.OutboxBatch,
		PollInterval: cfg.OutboxPoll,
		Lease:        cfg.OutboxLease,
		Deadline:     cfg.OutboxDeadline,
		// ConfirmTimeout: at most a third of the lease, checked by Load.
		ConfirmTimeout: cfg.OutboxConfirmTimeout,
		Log:            log.With("component", "outbox"),
		Registerer:     r.Metrics,
		WrongWay:       cfg.WrongWay,
	})
	if cfg.WrongWay.Any() {
		log.Warn("WRONG-WAY SWITCHES ON: this instance makes deliberate mistakes", "wrong_way", cfg.WrongWay.String())
	}
	r.Inbox = inbox.NewMetrics(r.Metrics)
	r.Batch = batch.NewMetrics(r.Metrics)
	r.redrive = r.Broker.NewPublisher()

	// Retention of the messaging tables, in every service. Concurrent on
	// every instance: each DELETE restates its conditions, and a rival's
	// deletions only shrink the next batch.
	cleaner := retention.New(db, retention.Config{
		InboxWindow:  cfg.InboxRetention,
		OutboxWindow: cfg.OutboxRetention,
		Interval:     cfg.RetentionInterval,
		Batch:        cfg.RetentionBatch,
		Log:          log.With("component", "retention"),
		Registerer:   r.Metrics,
	})
	r.Loop("retention", cleaner.Run)
	r.cleaner = cleaner
	// Delta events parked past their deadline are alerted on once each.
	// Concurrent on every instance: the stamp is compare-and-set, so one
	// instance alerts on each event.
	r.Metrics.MustRegister(ordering.ParkedCollector(db, log))
	r.Loop("parked events check", checkParked(db, cfg.ParkDeadline, log))
	return ctx, r, nil
}

// checkParked is the loop that alerts on delta events parked past their
// deadline, within a quarter of the deadline after it passed (every 30 s at
// most).
func checkParked(db *sqlx.DB, deadline time.Duration, log *slog.Logger) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		retry.Every(ctx, min(30*time.Second, max(deadline/4, 100*time.Millisecond)), func() {
			if _, err := ordering.OverdueParked(ctx, db, log); err != nil && ctx.Err() == nil {
				log.Warn("parked events check failed", "err", err)
			}
		})
		return nil
	}
}

// InboxConfig returns an inbox.Config with the runtime's pieces filled in,
// the replay window (INBOX_RETENTION) included.
func (r *Runtime) InboxConfig(name string) inbox.Config {
	return inbox.Config{Name: name, DB: r.DB, AfterCommit: r.Outbox.Wake, Log: r.Log,
		Metrics: r.Inbox, ReplayWindow: r.Cfg.InboxRetention, ParkDeadline: r.Cfg.ParkDeadline}
}

// PublishNow publishes one event straight to the broker and waits for its
// confirm, bypassing the outbox. Only the wrong-way switch
// publish-before-commit uses it.
func (r *Runtime) PublishNow(ctx context.Context, e events.Envelope) error {
	pub := r.Broker.NewPublisher()
	defer pub.Close()
	return pub.Publish(ctx, []rabbit.Message{rabbit.FromEnvelope(r.NS.Exchange(), e)}, 5*time.Second)[0]
}

// Consume registers a consume loop on queue (its namespaced name is made
// here) and the drain of its broker-side dead-letter queue. It is also the
// registry the dead-letter redrive uses to find a consumer's queue, so call
// it before Serve. bh is c's batch layer (pkg/inbox/batch), used when
// CONSUMER_BATCH > 1; nil: c alone, one delivery at a time.
//
// In demo mode the lab's wrong ways of the inbox (inbox.Consumer.WrongWays)
// are wired here, around the right ones: while one's switch is on, every
// delivery takes it, one at a time.
func (r *Runtime) Consume(queue string, c *inbox.Consumer, bh rabbit.BatchHandler) {
	one := wrongway.Pick(r.Cfg.WrongWay, rabbit.Handler(c.Handle), c.WrongWays()...)
	cs := consumer{queue: r.NS.Queue(queue), c: c,
		one: func(ctx context.Context, d rabbit.Delivery) rabbit.Decision { return one()(ctx, d) }}
	if bh != nil {
		var alts []wrongway.Alt[rabbit.BatchHandler]
		for _, a := range c.WrongWays() {
			alts = append(alts, wrongway.Alt[rabbit.BatchHandler]{Switch: a.Switch, Way: rabbit.OneAtATime(a.Way)})
		}
		many := wrongway.Pick(r.Cfg.WrongWay, bh, alts...)
		cs.batch = func(ctx context.Context, ds []rabbit.Delivery) []rabbit.Decision { return many()(ctx, ds) }
	}
	r.consumers = append(r.consumers, cs)
}

// ConsumeWith registers consumer name on queue (Consume): the chapter's
// consumer running hs one event per transaction, and the batch layer over
// it (pkg/inbox/batch).
func ConsumeWith[S any](r *Runtime, queue, name string, hs batch.Handlers[S]) {
	c, b := batch.New(r.InboxConfig(name), hs, batch.Options{Timeout: handlerTimeout, Metrics: r.Batch})
	r.Consume(queue, c, b.HandleBatch)
}

// handlerTimeout bounds the work of one delivery (rabbit.ConsumeConfig's
// HandlerTimeout; each delivery of a batch on its own).
const handlerTimeout = 30 * time.Second

// QueueOf returns the (namespaced) queue the consumer of that name reads.
func (r *Runtime) QueueOf(consumerName string) (string, bool) {
	for _, c := range r.consumers {
		if c.c.Name() == consumerName {
			return c.queue, true
		}
	}
	return "", false
}

// RetainKeys adds a table of the service's idempotency keys to the
// retention job: forget removes (or forgets) at most batch keys older than
// IDEMPOTENCY_KEY_RETENTION. Call it before Serve.
func (r *Runtime) RetainKeys(table string, forget func(ctx context.Context, db sqlx.ExecerContext, retention time.Duration, batch int) (int64, error)) {
	window := r.Cfg.KeyRetention
	r.cleaner.Add(retention.Table{Name: table, Delete: func(ctx context.Context, db *sqlx.DB, batch int) (int64, error) {
		return forget(ctx, db, window, batch)
	}})
}

// Loop registers a background job that runs until ctx ends.
func (r *Runtime) Loop(name string, run func(ctx context.Context) error) {
	r.loops = append(r.loops, loop{name: name, run: run})
}

// Ready reports whether the database and the broker are reachable.
func (r *Runtime) Ready(ctx context.Context) error {
	if err := r.DB.PingContext(ctx); err != nil {
		return fmt.Errorf("database: %w", err)
	}
	if !r.Broker.Connected() {
		return errors.New("broker: not connected")
	}
	return nil
}

// Router returns a router with the endpoints every service has: /healthz,
// /readyz, /metrics, /admin (the messaging tables, plus the service's own
// admin routes, behind ADMIN_TOKEN) and, in demo mode only,
// /debug/failpoints, /debug/wrong-way and /debug/journal.
func (r *Runtime) Router(adminRoutes ...func(chi.Router)) chi.Router {
	mux := BaseRouter(r.Cfg, r.started, r.Ready, r.Metrics, r.Failpoints, r.Tracing.TracerProvider())
	mux.Route("/admin", func(ar chi.Router) {
		ar.Use(AdminToken(r.Cfg))
		(&admin.Handler{DB: r.DB, Log: r.Log, Service: r.Cfg.Name, Instance: r.Cfg.InstanceID, Wake: r.Outbox.Wake, Redriver: &deadletter.Redriver{
			DB: r.DB, Publisher: r.redrive, QueueOf: r.QueueOf, Log: r.Log.With("component", "redrive"), OnRedriven: r.Inbox.Redriven,
		}}).Routes(ar)
		for _, routes := range adminRoutes {
			routes(ar)
		}
	})
	if r.Cfg.DemoMode {
		mux.Group(func(dr chi.Router) {
			dr.Use(DebugToken(r.Cfg))
			dr.Handle("/debug/wrong-way", r.Cfg.WrongWay.Handler(r.Log))
			dr.Handle("/debug/journal", r.Journal)
			// Profiles for docs/performance.md (demo mode only).
			dr.HandleFunc("/debug/pprof/*", pprof.Index)
			dr.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
			dr.HandleFunc("/debug/pprof/profile", pprof.Profile)
			dr.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			dr.HandleFunc("/debug/pprof/trace", pprof.Trace)
		})
	}
	return mux
}

// Serve runs everything until ctx ends, then shuts down in reverse order:
// stop taking HTTP requests and deliveries, let in-flight requests, messages
// (transaction and ack) and the dispatcher's batch finish, then close the
// broker connection and the database. Shutdown is bounded by
// SHUTDOWN_TIMEOUT. If a component fails, the others are stopped too.
func (r *Runtime) Serve(ctx context.Context, handler http.Handler) error {
	defer r.DB.Close()
	l, err := net.Listen("tcp", r.Cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", r.Cfg.HTTPAddr, err)
	}
	r.Log.Info("listening", "addr", l.Addr().String())

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The broker outlives the work that uses it, so acks and confirms of
	// in-flight messages can still be sent during shutdown.
	brokerCtx, stopBroker := context.WithCancel(context.WithoutCancel(ctx))
	var brokerWG sync.WaitGroup
	brokerWG.Add(1)
	go func() { defer brokerWG.Done(); _ = r.Broker.Run(brokerCtx) }()

	var wg sync.WaitGroup
	run := func(name string, fn func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx); err != nil && ctx.Err() == nil {
				r.Log.Error("component failed; shutting down", "component", name, "err", err)
				cancel(fmt.Errorf("%s: %w", name, err))
			}
		}()
	}
	run("http", func(ctx context.Context) error { return web.Serve(ctx, l, handler, r.Cfg.ShutdownTimeout) })
	if r.Cfg.OutboxDispatch {
		// Concurrent on every instance: claims are FOR UPDATE SKIP LOCKED
		// with a claim token, and only the token's holder marks a row sent.
		run("outbox", r.Outbox.Run)
	} else {
		r.Log.Warn("outbox dispatcher disabled (OUTBOX_DISPATCH=off): events stay pending")
	}
	for _, c := range r.consumers {
		cfg := rabbit.ConsumeConfig{Queue: c.queue, Prefetch: r.Cfg.Prefetch, Workers: r.Cfg.ConsumerWorkers,
			Batch: r.Cfg.ConsumerBatch, HandlerTimeout: handlerTimeout, Log: r.Log.With("consumer", c.c.Name())}
		run("consume "+c.queue, func(ctx context.Context) error {
			if cfg.Batch > 1 && c.batch != nil {
				return r.Broker.ConsumeBatch(ctx, cfg, c.batch)
			}
			return r.Broker.Consume(ctx, cfg, c.one)
		})
		dead := rabbit.ConsumeConfig{Queue: rabbit.Queue{Name: c.queue}.DeadQueue(), Prefetch: 8, Workers: 1,
			Log: r.Log.With("consumer", c.c.Name())}
		run("drain "+dead.Queue, func(ctx context.Context) error {
			return r.Broker.Consume(ctx, dead, c.c.HandleBrokerDeadLetter)
		})
	}
	for _, l := range r.loops {
		run(l.name, l.run)
	}

	<-ctx.Done()
	r.Log.Info("shutting down", "cause", context.Cause(ctx))
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var shutdownErr error
	select {
	case <-done:
	case <-time.After(r.Cfg.ShutdownTimeout):
		shutdownErr = fmt.Errorf("shutdown: components still running after %s", r.Cfg.ShutdownTimeout)
	}
	r.redrive.Close()
	stopBroker()
	brokerWG.Wait()
	if err := r.Tracing.Shutdown(ctx); err != nil {
		r.Log.Warn("tracing: spans not sent at shutdown", "err", err)
	}
	r.Log.Info("stopped")
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return errors.Join(cause, shutdownErr)
	}
	return shutdownErr
}
