package inbox

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts what consumers do, labelled by consumer name.
type Metrics struct {
	deliveries, redeliveries, processed, duplicates, retries, deadLetters *prometheus.CounterVec
	payloadMismatch, redriven, parked, unparked, stale                    *prometheus.CounterVec
}

// ConsumerCounter is a counter of consumer metrics: labelled by consumer
// name, like every consumer_* series, here and in the batch layer
// (pkg/inbox/batch), so that one label selects a consumer's whole story.
func ConsumerCounter(name, help string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"consumer"})
}

// NewMetrics creates the consumer metrics and registers them on reg (nil:
// not exported).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		deliveries:   ConsumerCounter("consumer_deliveries_total", "Messages delivered to the consumer."),
		redeliveries: ConsumerCounter("consumer_redeliveries_total", "Deliveries flagged redelivered by the broker (a lost ack or a crash)."),
		processed:    ConsumerCounter("consumer_processed_total", "Events committed (business change + inbox row)."),
		duplicates:   ConsumerCounter("consumer_duplicates_suppressed_total", "Deliveries of an event the inbox had already seen."),
		retries:      ConsumerCounter("consumer_retries_total", "Transient failures scheduled for a delayed retry."),
		deadLetters:  ConsumerCounter("consumer_dead_letters_total", "Messages stored as dead letters."),
		payloadMismatch: ConsumerCounter("consumer_payload_mismatch_total",
			"Deliveries of an event_id this consumer already processed with a different payload (alert: stored as dead letters, never applied)."),
		redriven: ConsumerCounter("consumer_dead_letters_redriven_total", "Dead letters republished to the consumer's queue by an operator."),
		parked:   ConsumerCounter("consumer_parked_total", "Delta events parked because an earlier version of their aggregate had not arrived."),
		unparked: ConsumerCounter("consumer_unparked_total", "Parked delta events applied once their gap filled."),
		stale: ConsumerCounter("consumer_stale_events_total",
			"Snapshot or delta events not newer than the version applied: recorded in the inbox and acked, not applied."),
	}
	if reg != nil {
		for _, c := range m.counters() {
			reg.MustRegister(c)
		}
	}
	return m
}

// start exports every counter of a consumer at zero from the beginning, so
// dashboards and alerts see the series before the first event (an absent
// series and a zero are not the same thing to Prometheus).
func (m *Metrics) start(consumer string) {
	for _, c := range m.counters() {
		c.WithLabelValues(consumer)
	}
}

func (m *Metrics) counters() []*prometheus.CounterVec {
	return []*prometheus.CounterVec{m.deliveries, m.redeliveries, m.processed, m.duplicates, m.retries,
		m.deadLetters, m.payloadMismatch, m.redriven, m.parked, m.unparked, m.stale}
}

// Redriven counts one dead letter of consumer republished by an operator:
// the deadletter.Redriver's OnRedriven.
func (m *Metrics) Redriven(consumer string) { m.redriven.WithLabelValues(consumer).Inc() }
