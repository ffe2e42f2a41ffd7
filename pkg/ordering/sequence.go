package ordering

import (
	"context"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/events"
)

// inbox_sequences holds, per consumer and aggregate (its type and id), the
// last version applied, for the strategies that compare versions (delta,
// snapshot); its row lock is where deliveries of one aggregate queue up.

// versioned runs an event whose strategy compares versions (delta,
// snapshot) under the lock of its aggregate's sequence: a version at or
// below the last one applied is stale for both; a newer one goes to its
// strategy.
func (s *Sequencer) versioned(ctx context.Context, tx *sqlx.Tx, e events.Envelope, strategy events.Strategy, steps Steps) (Result, error) {
	agg := aggregateOf(e)
	last, err := lockSequence(ctx, tx, s.Consumer, agg)
	if err != nil {
		return Result{}, err
	}
	switch {
	case e.AggregateVersion <= last:
		return s.stale(ctx, e, last, steps)
	case strategy == events.Delta:
		return s.delta(ctx, tx, e, agg, last, steps)
	default:
		return s.snapshot(ctx, tx, e, agg, steps)
	}
}

// aggregate names one sequence of versions: the producer that numbers them
// and the aggregate id.
type aggregate struct {
	Type string
	ID   uint64
}

func (a aggregate) String() string { return fmt.Sprintf("%s %d", a.Type, a.ID) }

// aggregateOf is the aggregate whose version e carries. aggregate_version is
// numbered by the producing service per order (docs/contract.md,
// "Messages"): the order's, the reservation's and the payment's versions
// share the order id and count separately. The producer is the event
// type's first segment ("inventory.reserved": inventory).
func aggregateOf(e events.Envelope) aggregate {
	producer, _, _ := strings.Cut(e.Type, ".")
	return aggregate{Type: producer, ID: e.AggregateID}
}

// lockSequence returns the last version applied for the aggregate, with the
// row locked until the transaction ends (deliveries of one aggregate queue
// up here, so their order is decided once).
func lockSequence(ctx context.Context, tx *sqlx.Tx, consumer string, agg aggregate) (uint64, error) {
	const qEnsure = `INSERT INTO inbox_sequences (consumer_name, aggregate_type, aggregate_id, last_version) VALUES (?, ?, ?, 0)
ON DUPLICATE KEY UPDATE last_version = last_version`
	if _, err := tx.ExecContext(ctx, qEnsure, consumer, agg.Type, agg.ID); err != nil {
		return 0, fmt.Errorf("sequence of %s: %w", agg, err)
	}
	const q = `SELECT last_version FROM inbox_sequences
WHERE consumer_name = ? AND aggregate_type = ? AND aggregate_id = ? FOR UPDATE`
	var last uint64
	if err := tx.GetContext(ctx, &last, q, consumer, agg.Type, agg.ID); err != nil {
		return 0, fmt.Errorf("sequence of %s: %w", agg, err)
	}
	return last, nil
}

func setSequence(ctx context.Context, tx *sqlx.Tx, consumer string, agg aggregate, last uint64) error {
	const q = `UPDATE inbox_sequences SET last_version = ?, updated_at = NOW(6)
WHERE consumer_name = ? AND aggregate_type = ? AND aggregate_id = ? AND last_version < ?`
	if _, err := tx.ExecContext(ctx, q, last, consumer, agg.Type, agg.ID, last); err != nil {
		return fmt.Errorf("advance sequence of %s: %w", agg, err)
	}
	return nil
}

// stale takes an event at or below the version already applied: the inbox
// tells a redelivery (ErrAlreadyProcessed: a duplicate) from a stale copy,
// which is recorded as done, not applied, and logged; Result.Stale lets the
// consumer count it.
func (s *Sequencer) stale(ctx context.Context, e events.Envelope, last uint64, steps Steps) (Result, error) {
	if err := steps.Record(e); err != nil {
		return Result{}, err
	}
	s.log().WarnContext(ctx, "event not newer than the version applied: recorded, not applied",
		"consumer", s.Consumer, "event_id", e.EventID, "event_type", e.Type, "order_id", e.AggregateID,
		"version", e.AggregateVersion, "applied", last, "strategy", events.StrategyOf(e.Type))
	return Result{Stale: true}, nil
}
