// Package retention removes the messaging rows that have served their
// purpose, in small batches, so the tables do not grow forever (the
// chapter: "retention is also a correctness boundary"):
//
//   - inbox rows older than the replay window (INBOX_RETENTION, default
//     168h). Until then a redelivered or replayed event is a duplicate the
//     inbox drops; after it, the row is gone, so consumers refuse events
//     older than the same window (inbox.ErrTooOld: a dead letter, applied by
//     hand after checking).
//   - outbox rows in status 'sent' older than OUTBOX_RETENTION (default
//     72h), kept that long for investigations only.
//
// A service adds its own expiring rows with Add (the idempotency keys of
// its HTTP API, kept for IDEMPOTENCY_KEY_RETENTION): drained the same way,
// counted under their table's name.
//
// It never deletes 'pending', 'sending' or 'failed' outbox rows, dead
// letters, or any parked or service table (needs_attention, event_gaps):
// those wait for an operator.
//
// Every batch is short autocommit statements on an index, so no
// transaction holds locks for long, and several instances may clean at
// once: a row is deleted by exactly one of them (the others find it gone
// and count nothing). A run deletes batches until one comes back short, or
// MaxBatches per table, and continues at the next interval. The statements
// belong to the tables' owners: inbox.DeleteExpired and outbox.DeleteSent
// say how each uses its index.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/sqldb"
)

// Config sets the windows and the pace.
type Config struct {
	InboxWindow  time.Duration // INBOX_RETENTION: the inbox replay window [168h]
	OutboxWindow time.Duration // OUTBOX_RETENTION: how long 'sent' outbox rows stay [72h]
	Interval     time.Duration // RETENTION_INTERVAL: between runs [1m]
	Batch        int           // RETENTION_BATCH: rows per DELETE [1000]
	MaxBatches   int           // per table and run [100]
	Log          *slog.Logger
	Registerer   prometheus.Registerer // nil: metrics not exported
}

// Cleaner deletes expired inbox and sent outbox rows.
type Cleaner struct {
	db      *sqlx.DB
	cfg     Config
	deleted *prometheus.CounterVec
	extra   []Table
}

// Table is a service's own expiring rows: Delete removes (or forgets) at
// most batch of them and says how many; the table's owner writes it.
type Table struct {
	Name   string
	Delete func(ctx context.Context, db *sqlx.DB, batch int) (int64, error)
}

// Add drains t too, in every run after the messaging tables. Call it
// before Run.
func (c *Cleaner) Add(t Table) {
	c.extra = append(c.extra, t)
	c.deleted.WithLabelValues(t.Name) // export a zero
}

// New checks cfg and fills in defaults.
func New(db *sqlx.DB, cfg Config) *Cleaner {
	if cfg.InboxWindow <= 0 {
		cfg.InboxWindow = inbox.DefaultReplayWindow
	}
	if cfg.OutboxWindow <= 0 {
		cfg.OutboxWindow = 72 * time.Hour
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Minute
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 1000
	}
	if cfg.MaxBatches <= 0 {
		cfg.MaxBatches = 100
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	c := &Cleaner{db: db, cfg: cfg, deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "retention_deleted_total",
		Help: "Rows deleted by the retention job after their window (" + inbox.Table + ": replay window; " + outbox.Table + ": sent rows; a service's idempotency keys under their table).",
	}, []string{"table"})}
	for _, t := range []string{inbox.Table, outbox.Table} {
		c.deleted.WithLabelValues(t) // export zeros
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(c.deleted)
	}
	return c
}

// Deleted is what one run removed, per table.
type Deleted struct {
	Inbox  int64
	Outbox int64
	Added  int64 // in the tables of Add, together (logged per table)
}

// RunOnce runs one cleaning round: batches of each table until a short
// batch or MaxBatches. It returns what it deleted, even with an error.
func (c *Cleaner) RunOnce(ctx context.Context) (Deleted, error) {
	var d Deleted
	var errs []error
	n, err := c.drain(ctx, inbox.Table, func(ctx context.Context) (int64, bool, error) {
		// One DELETE ... LIMIT: rows a rival deletes first are skipped and
		// the batch fills with others, so a short count means the end.
		n, err := inbox.DeleteExpired(ctx, c.db, c.cfg.InboxWindow, c.cfg.Batch)
		return n, n == int64(c.cfg.Batch), err
	})
	d.Inbox = n
	errs = append(errs, err)
	n, err = c.drain(ctx, outbox.Table, func(ctx context.Context) (int64, bool, error) {
		return outbox.DeleteSent(ctx, c.db, c.cfg.OutboxWindow, c.cfg.Batch)
	})
	d.Outbox = n
	errs = append(errs, err)
	for _, t := range c.extra {
		n, err := c.drain(ctx, t.Name, func(ctx context.Context) (int64, bool, error) {
			n, err := t.Delete(ctx, c.db, c.cfg.Batch)
			return n, n == int64(c.cfg.Batch), err
		})
		d.Added += n
		if n > 0 {
			c.cfg.Log.Info("retention round", "table", t.Name, "deleted", n)
		}
		errs = append(errs, err)
	}
	return d, errors.Join(errs...)
}

// transientTries bounds how often one batch is retried after a deadlock or
// a lock wait timeout (another instance deleting the same rows).
const transientTries = 3

// drain runs batch until it reports no full batch, or MaxBatches.
func (c *Cleaner) drain(ctx context.Context, table string, batch func(context.Context) (n int64, full bool, err error)) (int64, error) {
	var total int64
	tries := 0
	for i := 0; i < c.cfg.MaxBatches; i++ {
		n, full, err := batch(ctx)
		if err != nil {
			tries++
			if sqldb.IsTransient(err) && tries < transientTries && ctx.Err() == nil {
				continue
			}
			return total, fmt.Errorf("retention %s: %w", table, err)
		}
		tries = 0
		total += n
		c.deleted.WithLabelValues(table).Add(float64(n))
		if !full {
			return total, nil
		}
	}
	c.cfg.Log.Info("retention: more rows to delete than one run takes; continuing next run",
		"table", table, "deleted", total, "max_batches", c.cfg.MaxBatches, "batch", c.cfg.Batch)
	return total, nil
}

// Run cleans at once and then every Interval until ctx ends. A failed round
// is logged and retried at the next interval; Run itself only returns nil.
func (c *Cleaner) Run(ctx context.Context) error {
	c.cfg.Log.Info("retention job started", "inbox_window", c.cfg.InboxWindow.String(),
		"outbox_window", c.cfg.OutboxWindow.String(), "interval", c.cfg.Interval.String(), "batch", c.cfg.Batch)
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		d, err := c.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			c.cfg.Log.Warn("retention round failed; retrying next interval", "err", err)
		}
		if d.Inbox > 0 || d.Outbox > 0 {
			c.cfg.Log.Info("retention round", "inbox_deleted", d.Inbox, "outbox_deleted", d.Outbox)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
