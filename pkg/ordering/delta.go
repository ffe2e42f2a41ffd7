package ordering

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
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
//     says so) or a stale copy under another id: recorded, not applied
//     (versioned, in sequence.go);
//   - a gap still open at the deadline is alerted on (OverdueParked,
//     consumer_parked_events{state="overdue"}) and the parked row stays as
//     the recovery record until the missing event arrives (redrive it from
//     the producer's outbox) and the successors apply.
func (s *Sequencer) delta(ctx context.Context, tx *sqlx.Tx, e events.Envelope, agg aggregate, last uint64, steps Steps) (Result, error) {
	if e.AggregateVersion > last+1 {
		return Result{Parked: true}, park(ctx, tx, s.Consumer, agg, e, last+1, s.deadline())
	}
	if err := steps.Apply(e); err != nil {
		return Result{}, err
	}
	last = e.AggregateVersion
	// The gap may have been this event: apply the parked successors.
	var res Result
	for {
		next, ok, err := parkedNext(ctx, tx, s.Consumer, agg, last+1)
		if err != nil {
			return Result{}, err
		}
		if !ok {
			break
		}
		if err := steps.Apply(next); err != nil {
			return Result{}, fmt.Errorf("apply parked %s v%d: %w", next.EventID, next.AggregateVersion, err)
		}
		if err := markApplied(ctx, tx, s.Consumer, next.EventID); err != nil {
			return Result{}, err
		}
		res.Unparked++
		last = next.AggregateVersion
	}
	return res, setSequence(ctx, tx, s.Consumer, agg, last)
}

func (s *Sequencer) deadline() time.Duration {
	if s.ParkDeadline <= 0 {
		return DefaultParkDeadline
	}
	return s.ParkDeadline
}

func (s *Sequencer) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// park stores the event as a waiting task. A redelivery of an event that is
// already parked is ErrAlreadyParked.
func park(ctx context.Context, tx *sqlx.Tx, consumer string, agg aggregate, e events.Envelope, expected uint64, deadline time.Duration) error {
	const q = `INSERT INTO parked_events
  (consumer_name, event_id, event_type, aggregate_type, aggregate_id, aggregate_version, expected_version,
   schema_version, payload, traceparent, deadline_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, TIMESTAMPADD(MICROSECOND, ?, NOW(6)))`
	var trace any
	if e.Traceparent != "" {
		trace = e.Traceparent
	}
	_, err := tx.ExecContext(ctx, q, consumer, e.EventID, e.Type, agg.Type, agg.ID, e.AggregateVersion, expected,
		e.SchemaVersion, []byte(e.Payload), trace, deadline.Microseconds())
	if sqldb.IsDuplicateKey(err) {
		return ErrAlreadyParked
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

func parkedNext(ctx context.Context, tx *sqlx.Tx, consumer string, agg aggregate, version uint64) (events.Envelope, bool, error) {
	const q = `SELECT event_id, event_type, aggregate_id, aggregate_version, schema_version, payload, traceparent
FROM parked_events
WHERE consumer_name = ? AND aggregate_type = ? AND aggregate_id = ? AND aggregate_version = ? AND applied_at IS NULL
ORDER BY parked_at LIMIT 1 FOR UPDATE`
	var r parkedRow
	err := tx.GetContext(ctx, &r, q, consumer, agg.Type, agg.ID, version)
	if errors.Is(err, sql.ErrNoRows) {
		return events.Envelope{}, false, nil
	}
	if err != nil {
		return events.Envelope{}, false, fmt.Errorf("next parked event of %s: %w", agg, err)
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
