// Package scrape makes the collectors of metrics that are read from the
// tables at scrape time, not counted in memory: the numbers are the
// persisted truth, survive restarts, and include what other instances did.
package scrape

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Timeout bounds the reads of one scrape.
const Timeout = 5 * time.Second

// Collector is the collector of descs whose metrics read makes at each
// scrape, within Timeout. If read fails (the database does not answer),
// its metrics are left out of the scrape and the failure logged as
// "metrics: "+what, rather than failing the whole scrape: the missing
// series is the signal, and the rest of the scrape still works.
func Collector(log *slog.Logger, what string, read func(context.Context) ([]prometheus.Metric, error),
	descs ...*prometheus.Desc) prometheus.Collector {
	return &collector{log: log, what: what, read: read, descs: descs}
}

type collector struct {
	log   *slog.Logger
	what  string
	read  func(context.Context) ([]prometheus.Metric, error)
	descs []*prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	ms, err := c.read(ctx)
	if err != nil {
		c.log.Warn("metrics: "+c.what, "err", err)
		return
	}
	for _, m := range ms {
		ch <- m
	}
}
