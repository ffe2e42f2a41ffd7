package testutil

import (
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Series writes each series as /metrics does; Metric finds one by a subset
// of its labels.
func TestSeriesAndMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "calls_total"}, []string{"call", "result"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "open"})
	reg.MustRegister(c, g)
	c.WithLabelValues("charge", "ok").Add(2)
	g.Set(3)
	want := map[string]float64{`calls_total{call="charge",result="ok"}`: 2, "open": 3}
	if got := Series(t, reg); !maps.Equal(got, want) {
		t.Errorf("Series = %v, want %v", got, want)
	}
	if v, ok := Metric(t, reg, "calls_total", "result", "ok"); !ok || v != 2 {
		t.Errorf("Metric(result=ok) = %v, %v; want 2", v, ok)
	}
	if v := MustMetric(t, reg, "open"); v != 3 {
		t.Errorf("MustMetric(open) = %v, want 3", v)
	}
	if v, ok := Metric(t, reg, "calls_total", "result", "error"); ok || v != 0 {
		t.Errorf("Metric(result=error) = %v, %v; want none", v, ok)
	}
}
