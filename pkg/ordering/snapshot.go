package ordering

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/events"
)

// Snapshot events (events.Snapshot) carry an aggregate's whole state, so
// the newest one wins and nothing needs to wait (the chapter: "完整状态快照：
// 可在业务允许时只接受更新版本，忽略过期快照"):
//
//   - a version newer than the last applied one is applied, whatever the
//     gap (each snapshot replaces the state entirely);
//   - a version at or below it is a redelivery (the inbox says so) or an
//     older snapshot that arrived late: recorded in the inbox, acknowledged,
//     counted (consumer_stale_events_total) and logged, not applied: it would
//     move the state back (versioned, in sequence.go).
func (s *Sequencer) snapshot(ctx context.Context, tx *sqlx.Tx, e events.Envelope, agg aggregate, steps Steps) (Result, error) {
	if err := steps.Apply(e); err != nil {
		return Result{}, err
	}
	return Result{}, setSequence(ctx, tx, s.Consumer, agg, e.AggregateVersion)
}
