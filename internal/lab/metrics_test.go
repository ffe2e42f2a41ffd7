package lab

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// SumSamples matches label values exactly: a label whose name ends like the
// one asked for, or a value that starts like it, is another series.
func TestSumSamplesMatchesLabelsExactly(t *testing.T) {
	reg := prometheus.NewRegistry()
	dups := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dups_total", Help: "h"}, []string{"consumer", "previous_consumer"})
	reg.MustRegister(dups)
	dups.WithLabelValues("inventory", "order").Add(2)
	dups.WithLabelValues("inventory", "payment").Add(3)
	dups.WithLabelValues("inventory-late", "order").Add(5)
	dups.WithLabelValues("order", "inventory").Add(7)
	pending := prometheus.NewGauge(prometheus.GaugeOpts{Name: "pending", Help: "h"})
	reg.MustRegister(pending)
	pending.Set(1.5)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	families, err := Scrape(context.Background(), http.DefaultClient, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"dups_total", []string{"consumer", "inventory"}, 5},
		{"dups_total", []string{"consumer", "inventory", "previous_consumer", "order"}, 2},
		{"dups_total", []string{"consumer", "inventory-late"}, 5},
		{"dups_total", nil, 17},
		{"dups_total", []string{"consumer", "invent"}, 0},
		{"pending", nil, 1.5},
		{"absent_total", nil, 0},
	} {
		if got := SumSamples(families, c.name, c.labels...); got != c.want {
			t.Errorf("SumSamples(%s, %q) = %g, want %g", c.name, c.labels, got, c.want)
		}
	}
}
