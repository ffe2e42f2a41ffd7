package testutil

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Series gathers g and returns the value of each counter and gauge by its
// series, written as /metrics writes it: name{label="value",...} with the
// labels sorted by name, or the name alone.
func Series(t testing.TB, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	each(t, g, func(name string, labels [][2]string, v float64) {
		var pairs []string
		for _, l := range labels {
			pairs = append(pairs, fmt.Sprintf("%s=%q", l[0], l[1]))
		}
		if len(pairs) > 0 {
			name += "{" + strings.Join(pairs, ",") + "}"
		}
		out[name] = v
	})
	return out
}

// Metric returns the value of the first counter or gauge of g named name
// whose labels include labels (name, value pairs), and whether g has one.
func Metric(t testing.TB, g prometheus.Gatherer, name string, labels ...string) (float64, bool) {
	t.Helper()
	var value float64
	found := false
	each(t, g, func(n string, have [][2]string, v float64) {
		if found || n != name {
			return
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if !contains(have, labels[i], labels[i+1]) {
				return
			}
		}
		value, found = v, true
	})
	return value, found
}

// MustMetric is Metric for a series g must have: the test fails if it has
// none.
func MustMetric(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	v, ok := Metric(t, g, name, labels...)
	if !ok {
		t.Fatalf("no series %s with labels %q", name, labels)
	}
	return v
}

func contains(labels [][2]string, name, value string) bool {
	for _, l := range labels {
		if l[0] == name && l[1] == value {
			return true
		}
	}
	return false
}

// each calls fn with every counter and gauge series of g: its name, its
// labels as gathered (sorted by name) and its value.
func each(t testing.TB, g prometheus.Gatherer, fn func(name string, labels [][2]string, v float64)) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels [][2]string
			for _, l := range m.GetLabel() {
				labels = append(labels, [2]string{l.GetName(), l.GetValue()})
			}
			switch {
			case m.GetCounter() != nil:
				fn(mf.GetName(), labels, m.GetCounter().GetValue())
			case m.GetGauge() != nil:
				fn(mf.GetName(), labels, m.GetGauge().GetValue())
			}
		}
	}
}
