package batch

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/pkg/inbox"
)

// Metrics counts what the batch layer does, labelled by consumer name. The
// events themselves are counted by the chapter's consumer
// (consumer_processed_total and the others), once each, when decided.
type Metrics struct {
	batches, events, fallbacks *prometheus.CounterVec
}

// NewMetrics creates the batch metrics and registers them on reg (nil: not
// exported).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	counter := inbox.ConsumerCounter
	m := &Metrics{
		batches: counter("consumer_batches_total", "Transactions that committed several events together (CONSUMER_BATCH)."),
		events:  counter("consumer_batched_events_total", "Events committed in those transactions."),
		fallbacks: counter("consumer_batch_fallbacks_total",
			"Batches rolled back because one event failed, their deliveries then processed one at a time."),
	}
	if reg != nil {
		reg.MustRegister(m.batches, m.events, m.fallbacks)
	}
	return m
}

// start exports the consumer's counters at zero from the beginning.
func (m *Metrics) start(consumer string) {
	for _, c := range []*prometheus.CounterVec{m.batches, m.events, m.fallbacks} {
		c.WithLabelValues(consumer)
	}
}
