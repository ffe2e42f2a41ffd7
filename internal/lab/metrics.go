package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Scrape reads a service's /metrics endpoint (url is the whole URL) and
// returns its metric families by name. expfmt decodes the body in the
// format the response's Content-Type names, as Prometheus would.
func Scrape(ctx context.Context, client *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	dec := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
	families := map[string]*dto.MetricFamily{}
	for {
		mf := &dto.MetricFamily{}
		if err := dec.Decode(mf); errors.Is(err, io.EOF) {
			return families, nil
		} else if err != nil {
			return nil, fmt.Errorf("GET %s: %w", url, err)
		}
		families[mf.GetName()] = mf
	}
}

// SumSamples adds up the counter, gauge or untyped samples of the family
// name whose labels have exactly the given values (labels are name, value,
// name, value, ...; labels not given may have any value). An absent family
// sums to 0: a labelled counter appears only once it has a value.
func SumSamples(families map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	var sum float64
	for _, m := range families[name].GetMetric() {
		if hasLabels(m, labels) {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, labels []string) bool {
	have := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for i := 0; i+1 < len(labels); i += 2 {
		if have[labels[i]] != labels[i+1] { // as in PromQL, an absent label is ""
			return false
		}
	}
	return true
}
