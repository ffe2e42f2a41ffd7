package scrape_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/pkg/base/scrape"
)

var waitingDesc = prometheus.NewDesc("test_waiting", "Rows waiting.", nil, nil)

func TestCollectorReportsWhatTheReadMade(t *testing.T) {
	var logs bytes.Buffer
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(scrape.Collector(slog.New(slog.NewTextHandler(&logs, nil)), "read waiting rows",
		func(ctx context.Context) ([]prometheus.Metric, error) {
			if _, ok := ctx.Deadline(); !ok {
				t.Error("the read has no deadline")
			}
			return []prometheus.Metric{prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, 3)}, nil
		}, waitingDesc))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "test_waiting" || mfs[0].GetMetric()[0].GetGauge().GetValue() != 3 {
		t.Fatalf("gathered %v, want test_waiting 3", mfs)
	}
	if logs.Len() != 0 {
		t.Errorf("logged %q on a read that worked", logs.String())
	}
}

func TestCollectorLeavesOutAFailedRead(t *testing.T) {
	var logs bytes.Buffer
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(scrape.Collector(slog.New(slog.NewTextHandler(&logs, nil)), "read waiting rows",
		func(context.Context) ([]prometheus.Metric, error) { return nil, errors.New("connection refused") },
		waitingDesc))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("a failed read failed the scrape: %v", err)
	}
	if len(mfs) != 0 {
		t.Errorf("gathered %v, want nothing", mfs)
	}
	if got := logs.String(); !strings.Contains(got, "metrics: read waiting rows") || !strings.Contains(got, "connection refused") {
		t.Errorf("logged %q, want the read named and its error", got)
	}
}
