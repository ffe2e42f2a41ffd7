package inbox

import (
	"log/slog"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/ordering"
)

// Config describes one consumer.
type Config struct {
	// Name is the consumer_name of the inbox key: a constant, because
	// renaming it would make every past event look new.
	Name     string
	DB       *sqlx.DB
	Handlers map[events.Type]Handler
	External map[events.Type]ExternalHandler
	// AfterCommit runs after each commit: the dispatcher's Wake.
	AfterCommit func()
	Backoff     retry.Backoff // between attempts after transient failures [500ms .. 1m]
	MaxAttempts int           // attempts before a message becomes a dead letter [8]
	MaxRetryAge time.Duration // time since the first failure after which we stop [15m]
	// ReplayWindow: how long inbox rows are kept (INBOX_RETENTION); an
	// older event becomes a dead letter [DefaultReplayWindow = 168h].
	ReplayWindow time.Duration
	Log          *slog.Logger
	Metrics      *Metrics      // shared by the consumers of one service; nil: none
	ParkDeadline time.Duration // a delta's wait for its gap [ordering.DefaultParkDeadline = 5m]
}

// Consumer runs the chapter's consume sequence for each delivery.
type Consumer struct {
	cfg   Config
	order ordering.Sequencer
}

// NewConsumer checks cfg and fills in defaults.
func NewConsumer(cfg Config) *Consumer {
	if cfg.Name == "" || cfg.DB == nil {
		panic("inbox: consumer needs a Name and a DB")
	}
	orDefault(&cfg.Backoff.Base, 500*time.Millisecond)
	orDefault(&cfg.Backoff.Cap, time.Minute)
	orDefault(&cfg.MaxAttempts, 8)
	orDefault(&cfg.MaxRetryAge, 15*time.Minute)
	orDefault(&cfg.ReplayWindow, DefaultReplayWindow)
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	cfg.Metrics.start(cfg.Name)
	return &Consumer{cfg: cfg, order: ordering.Sequencer{Consumer: cfg.Name, ParkDeadline: cfg.ParkDeadline, Log: cfg.Log}}
}

// Name is the consumer name (the inbox key prefix).
func (c *Consumer) Name() string { return c.cfg.Name }

// Config is the consumer's configuration, defaults filled in.
func (c *Consumer) Config() Config { return c.cfg }

func orDefault[T int | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}
