package ordering

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/pkg/base/scrape"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
)

// ParkedEvent is a delta event waiting for an earlier version of its
// aggregate, as operators see it.
type ParkedEvent struct {
	Consumer         string     `db:"consumer_name" json:"consumer"`
	EventID          string     `db:"event_id" json:"event_id"`
	EventType        string     `db:"event_type" json:"event_type"`
	AggregateType    string     `db:"aggregate_type" json:"aggregate_type"` // the producer numbering its versions
	AggregateID      uint64     `db:"aggregate_id" json:"aggregate_id,string"`
	AggregateVersion uint64     `db:"aggregate_version" json:"aggregate_version"`
	ExpectedVersion  uint64     `db:"expected_version" json:"waiting_for_version"`
	ParkedAt         time.Time  `db:"parked_at" json:"parked_at"`
	DeadlineAt       time.Time  `db:"deadline_at" json:"deadline_at"`
	AppliedAt        *time.Time `db:"applied_at" json:"applied_at"`
	AlertedAt        *time.Time `db:"alerted_at" json:"alerted_at"`
}

// The selections of ListParked.
const (
	Waiting = "waiting" // not applied yet
	Overdue = "overdue" // not applied, past the deadline
	All     = "all"     // applied ones too: the recovery records
)

// ListParked returns up to limit parked events in state (Waiting, Overdue
// or All), the latest first.
func ListParked(ctx context.Context, db sqlx.QueryerContext, state string, limit int) ([]ParkedEvent, error) {
	q := `SELECT consumer_name, event_id, event_type, aggregate_type, aggregate_id, aggregate_version, expected_version,
  parked_at, deadline_at, applied_at, alerted_at FROM parked_events`
	switch state {
	case Waiting:
		q += ` WHERE applied_at IS NULL`
	case Overdue:
		q += ` WHERE applied_at IS NULL AND deadline_at < NOW(6)`
	case All:
	default:
		return nil, fmt.Errorf("list parked events: unknown state %q", state)
	}
	q += ` ORDER BY parked_at DESC LIMIT ?`
	rows := []ParkedEvent{}
	if err := sqlx.SelectContext(ctx, db, &rows, q, limit); err != nil {
		return nil, fmt.Errorf("list parked events: %w", err)
	}
	return rows, nil
}

// OverdueParked alerts on every parked event whose gap did not fill before
// its deadline: it stamps alerted_at (the row stays as the recovery record),
// logs each event it stamped and returns how many. Several instances may
// run it at once: the stamp is a compare-and-set, and only the one whose
// UPDATE changed the row alerts, so each event is alerted on once.
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
	alerted := 0
	for _, r := range rows {
		res, err := db.ExecContext(ctx, qMark, r.Consumer, r.EventID)
		won, err := sqldb.Changed(res, err, "mark %s alerted", r.EventID)
		if err != nil {
			return alerted, err
		}
		if !won {
			continue // another instance alerted on it, or its gap filled meanwhile
		}
		alerted++
		log.Error("ALERT: a parked delta event's gap did not fill before its deadline; redrive the missing version from the producer",
			"consumer", r.Consumer, "event_id", r.EventID, "event_type", r.Type, "order_id", r.Agg,
			"version", r.Version, "missing_from", r.Expected, "deadline", r.Deadline)
	}
	return alerted, nil
}

var parkedDesc = prometheus.NewDesc("consumer_parked_events",
	"Delta events parked until the earlier versions of their aggregate arrive: waiting (within the deadline) or overdue (past it: alert).",
	[]string{"state"}, nil)

// ParkedCollector exports consumer_parked_events{state}, read at scrape
// time (scrape.Collector): parked events still waiting within their
// deadline, and overdue ones (alert on > 0).
func ParkedCollector(db *sqlx.DB, log *slog.Logger) prometheus.Collector {
	read := func(ctx context.Context) ([]prometheus.Metric, error) {
		const q = `SELECT
  COALESCE(SUM(deadline_at >= NOW(6)), 0) AS waiting,
  COALESCE(SUM(deadline_at < NOW(6)), 0) AS overdue
FROM parked_events WHERE applied_at IS NULL`
		var n struct {
			Waiting float64 `db:"waiting"`
			Overdue float64 `db:"overdue"`
		}
		if err := db.GetContext(ctx, &n, q); err != nil {
			return nil, err
		}
		return []prometheus.Metric{
			prometheus.MustNewConstMetric(parkedDesc, prometheus.GaugeValue, n.Waiting, "waiting"),
			prometheus.MustNewConstMetric(parkedDesc, prometheus.GaugeValue, n.Overdue, "overdue"),
		}, nil
	}
	return scrape.Collector(log, "read parked events", read, parkedDesc)
}
