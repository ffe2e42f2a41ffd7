package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/sqldb"
)

// Delta events (events.Delta) change an aggregate relative to its previous
// version: applying version 3 before 2 gives a wrong result, and skipping 2
// loses it. So a consumer applies them strictly in aggregate_version order
// (the chapter: "增量事件不能跳过缺失版本直接应用"):
//
//   - the next version is applied, then every parked successor that is now
//     next, in one transaction;
//   - a version ahead of a gap is parked in parked_events with a deadline,
//     and acked: it is a recoverable waiting task, not a processed event, so
//     it is not written to the inbox;
//   - a version at or below the last applied one is a redelivery (the inbox
//     says so) or a stale copy under another id: recorded, not applied;
//   - a gap still open at the deadline is alerted on (OverdueParked,
//     consumer_parked_events{state="overdue"}) and the parked row stays as
//     the recovery record until the missing event arrives (redrive it from
//     the producer's outbox) and the successors apply.

// ErrParked means the event waits for an earlier version of its aggregate.
var ErrParked = errors.New("event parked until the earlier versions of its aggregate arrive")

// DefaultParkDeadline is how long a parked delta may wait for its gap.
const DefaultParkDeadline = 5 * time.Minute

func (c *Consumer) processDelta(ctx context.Context, e events.Envelope, h Handler) error {
	deadline := c.cfg.ParkDeadline
	if deadline <= 0 {
		deadline = DefaultParkDeadline
	}
	parked := false
	err := sqldb.WithTx(ctx, c.cfg.DB, func(tx *sqlx.Tx) error {
		last, err := lockSequence(ctx, tx, c.cfg.Name, e.AggregateID)
		if err != nil {
			return err
		}
		switch {
		case e.AggregateVersion <= last:
			// Already past this version: the inbox tells a redelivery
			// (duplicate) from a stale copy under another id (recorded as
			// processed, not applied).
			if err := ClaimPayload(ctx, tx, c.cfg.Name, e.EventID, e.Payload); err != nil {
				return err
			}
			c.cfg.Log.WarnContext(ctx, "delta event at or below the applied version: recorded, not applied",
				"consumer", c.cfg.Name, "event_id", e.EventID, "aggregate_id", e.AggregateID,
				"version", e.AggregateVersion, "applied", last)
			return nil
		case e.AggregateVersion > last+1:
			parked = true
			return park(ctx, tx, c.cfg.Name, e, last+1, deadline)
		}
		if err := c.applyDelta(ctx, tx, e, h); err != nil {
			return err
		}
		last = e.AggregateVersion
		// The gap may have been this event: apply the parked successors.
		for {
			next, ok, err := parkedNext(ctx, tx, c.cfg.Name, e.AggregateID, last+1)
			if err != nil || !ok {
				if err != nil {
					return err
				}
				break
			}
			if err := c.applyDelta(ctx, tx, next, h); err != nil {
				return fmt.Errorf("apply parked %s v%d: %w", next.EventID, next.AggregateVersion, err)
			}
			if err := markApplied(ctx, tx, c.cfg.Name, next.EventID); err != nil {
				return err
			}
			c.cfg.Metrics.unparked.WithLabelValues(c.cfg.Name).Inc()
			last = next.AggregateVersion
		}
		return setSequence(ctx, tx, c.cfg.Name, e.AggregateID, last)
	})
	if err != nil {
		return err
	}
	if parked {
		c.cfg.Metrics.parked.WithLabelValues(c.cfg.Name).Inc()
		return ErrParked
	}
	if c.cfg.AfterCommit != nil {
		c.cfg.AfterCommit()
	}
	return nil
}

func (c *Consumer) applyDelta(ctx context.Context, tx *sqlx.Tx, e events.Envelope, h Handler) error {
	if err := ClaimPayload(ctx, tx, c.cfg.Name, e.EventID, e.Payload); err != nil {
		return err
	}
	return h(ctx, tx, e)
}

// lockSequence returns the last version applied for the aggregate, with the
// row locked until the transaction ends (deliveries of one aggregate queue
// up here, so their order is decided once).
func lockSequence(ctx context.Context, tx *sqlx.Tx, consumer string, aggregate uint64) (uint64, error) {
	const qEnsure = `INSERT INTO inbox_sequences (consumer_name, aggregate_id, last_version) VALUES (?, ?, 0)
ON DUPLICATE KEY UPDATE last_version = last_version`
	if _, err := tx.ExecContext(ctx, qEnsure, consumer, aggregate); err != nil {
		return 0, fmt.Errorf("sequence of %d: %w", aggregate, err)
	}
	const q = `SELECT last_version FROM inbox_sequences WHERE consumer_name = ? AND aggregate_id = ? FOR UPDATE`
	var last uint64
	if err := tx.GetContext(ctx, &last, q, consumer, aggregate); err != nil {
		return 0, fmt.Errorf("sequence of %d: %w", aggregate, err)
	}
	return last, nil
}

func setSequence(ctx context.Context, tx *sqlx.Tx, consumer string, aggregate, last uint64) error {
	const q = `UPDATE inbox_sequences SET last_version = ?, updated_at = NOW(6)
WHERE consumer_name = ? AND aggregate_id = ? AND last_version < ?`
	if _, err := tx.ExecContext(ctx, q, last, consumer, aggregate, last); err != nil {
		return fmt.Errorf("advance sequence of %d: %w", aggregate, err)
	}
	return nil
}

// park stores the event as a waiting task. A redelivery of an event that is
// already parked is a duplicate.
func park(ctx context.Context, tx *sqlx.Tx, consumer string, e events.Envelope, expected uint64, deadline time.Duration) error {
	const q = `INSERT INTO parked_events
  (consumer_name, event_id, event_type, aggregate_id, aggregate_version, expected_version, schema_version,
   payload, traceparent, deadline_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, TIMESTAMPADD(MICROSECOND, ?, NOW(6)))`
	var trace any
	if e.Traceparent != "" {
		trace = e.Traceparent
	}
	_, err := tx.ExecContext(ctx, q, consumer, e.EventID, e.Type, e.AggregateID, e.AggregateVersion, expected,
		e.SchemaVersion, []byte(e.Payload), trace, deadline.Microseconds())
	if sqldb.IsDuplicateKey(err) {
		return ErrAlreadyProcessed
	}
	if err != nil {
		return fmt.Errorf("park %s: %w", e.EventID, err)
	}
	return nil
}

type parkedRow struct {
	EventID          string         `db:"event_id"`
	EventType        string         `db:"event_type"`
	AggregateID      uint64         `db:"aggregate_id"`
	AggregateVersion uint64         `db:"aggregate_version"`
	SchemaVersion    int            `db:"schema_version"`
	Payload          []byte         `db:"payload"`
	Traceparent      sql.NullString `db:"traceparent"`
}

func parkedNext(ctx context.Context, tx *sqlx.Tx, consumer string, aggregate, version uint64) (events.Envelope, bool, error) {
	const q = `SELECT event_id, event_type, aggregate_id, aggregate_version, schema_version, payload, traceparent
FROM parked_events
WHERE consumer_name = ? AND aggregate_id = ? AND aggregate_version = ? AND applied_at IS NULL
ORDER BY parked_at LIMIT 1 FOR UPDATE`
	var r parkedRow
	err := tx.GetContext(ctx, &r, q, consumer, aggregate, version)
	if errors.Is(err, sql.ErrNoRows) {
		return events.Envelope{}, false, nil
	}
	if err != nil {
		return events.Envelope{}, false, fmt.Errorf("next parked event of %d: %w", aggregate, err)
	}
	return events.Envelope{EventID: r.EventID, Type: r.EventType, AggregateID: r.AggregateID,
		AggregateVersion: r.AggregateVersion, SchemaVersion: r.SchemaVersion, CorrelationID: fmt.Sprint(r.AggregateID),
		Payload: r.Payload, Traceparent: r.Traceparent.String}, true, nil
}

func markApplied(ctx context.Context, tx *sqlx.Tx, consumer, eventID string) error {
	const q = `UPDATE parked_events SET applied_at = NOW(6) WHERE consumer_name = ? AND event_id = ? AND applied_at IS NULL`
	_, err := tx.ExecContext(ctx, q, consumer, eventID)
	return err
}

// OverdueParked alerts on every parked event whose gap did not fill before
// its deadline: it logs each once, stamps alerted_at (the row stays as the
// recovery record) and returns how many it found.
func OverdueParked(ctx context.Context, db *sqlx.DB, log *slog.Logger) (int, error) {
	const q = `SELECT consumer_name, event_id, event_type, aggregate_id, aggregate_version, expected_version, deadline_at
FROM parked_events WHERE applied_at IS NULL AND alerted_at IS NULL AND deadline_at < NOW(6) LIMIT 100`
	var rows []struct {
		Consumer string    `db:"consumer_name"`
		EventID  string    `db:"event_id"`
		Type     string    `db:"event_type"`
		Agg      uint64    `db:"aggregate_id"`
		Version  uint64    `db:"aggregate_version"`
		Expected uint64    `db:"expected_version"`
		Deadline time.Time `db:"deadline_at"`
	}
	if err := db.SelectContext(ctx, &rows, q); err != nil {
		return 0, fmt.Errorf("overdue parked events: %w", err)
	}
	const qMark = `UPDATE parked_events SET alerted_at = NOW(6)
WHERE consumer_name = ? AND event_id = ? AND applied_at IS NULL AND alerted_at IS NULL`
	for _, r := range rows {
		if _, err := db.ExecContext(ctx, qMark, r.Consumer, r.EventID); err != nil {
			return 0, fmt.Errorf("mark alerted: %w", err)
		}
		log.Error("ALERT: a parked delta event's gap did not fill before its deadline; redrive the missing version from the producer",
			"consumer", r.Consumer, "event_id", r.EventID, "event_type", r.Type, "order_id", r.Agg,
			"version", r.Version, "missing_from", r.Expected, "deadline", r.Deadline)
	}
	return len(rows), nil
}

// ParkedCollector exports consumer_parked_events{state}: parked events
// still waiting within their deadline, and overdue ones (alert on > 0).
func ParkedCollector(db *sqlx.DB) prometheus.Collector { return &parkedCollector{db: db} }

var parkedDesc = prometheus.NewDesc("consumer_parked_events",
	"Delta events parked until the earlier versions of their aggregate arrive: waiting (within the deadline) or overdue (past it: alert).",
	[]string{"state"}, nil)

type parkedCollector struct{ db *sqlx.DB }

func (c *parkedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- parkedDesc }

func (c *parkedCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	const q = `SELECT
  COALESCE(SUM(deadline_at >= NOW(6)), 0) AS waiting,
  COALESCE(SUM(deadline_at < NOW(6)), 0) AS overdue
FROM parked_events WHERE applied_at IS NULL`
	var n struct {
		Waiting float64 `db:"waiting"`
		Overdue float64 `db:"overdue"`
	}
	if err := c.db.GetContext(ctx, &n, q); err != nil {
		ch <- prometheus.NewInvalidMetric(parkedDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(parkedDesc, prometheus.GaugeValue, n.Waiting, "waiting")
	ch <- prometheus.MustNewConstMetric(parkedDesc, prometheus.GaugeValue, n.Overdue, "overdue")
}
