package outbox

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/pkg/aids/wrongway"
	"github.com/relmsg/ordersaga/pkg/base/retry"
)

// Config tunes a Dispatcher. Zero values take the defaults in brackets.
type Config struct {
	Exchange     string           // events go to this exchange, routed by their type
	NewPublisher func() Publisher // one per worker: each owns its AMQP channel
	Workers      int              // claim-publish-mark loops in this process [1]
	BatchSize    int              // rows per claim [100]
	// Lease is how long a claim is ours before recovery may hand the rows
	// to another dispatcher [30s]. ConfirmTimeout bounds the wait for
	// publisher confirms: at most a third of the lease, so that a batch whose
	// renewals failed still has two thirds of its lease to be marked before
	// recovery may re-send it [DefaultConfirmTimeout(Lease)]; New refuses
	// more.
	Lease           time.Duration
	ConfirmTimeout  time.Duration
	PollInterval    time.Duration // fallback poll when no wake-up came [1s]
	RecoverInterval time.Duration // how often expired leases are recovered [min(5s, Lease/3)]
	RecoverBatch    int           // rows per recovery statement [500]
	Backoff         retry.Backoff // between failed attempts [1s .. 5m]
	MaxAttempts     int           // attempts before 'failed' [10]
	// Deadline ends the retrying of an event this long after its first
	// attempt, whatever attempts remain: 'failed' [15m].
	Deadline   time.Duration
	Log        *slog.Logger
	Registerer prometheus.Registerer // nil: metrics are kept but not exported
	// WrongWay turns on deliberate mistakes for the experiments (demo only).
	WrongWay *wrongway.Set
}

func (c *Config) setDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Workers, 1)
	def(&c.BatchSize, 100)
	def(&c.RecoverBatch, 500)
	def(&c.MaxAttempts, 10)
	defDur(&c.Deadline, 15*time.Minute)
	defDur(&c.Lease, 30*time.Second)
	defDur(&c.ConfirmTimeout, DefaultConfirmTimeout(c.Lease))
	defDur(&c.PollInterval, time.Second)
	// Recover soon after a lease can have expired, at most every 5 s.
	defDur(&c.RecoverInterval, min(5*time.Second, c.Lease/3))
	defDur(&c.Backoff.Base, time.Second)
	defDur(&c.Backoff.Cap, 5*time.Minute)
	if c.Log == nil {
		c.Log = slog.Default()
	}
}
