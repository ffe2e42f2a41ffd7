// Package ordering is the chapter's "去重解决不了乱序" (dedupe does not solve
// ordering): the inbox makes each event take effect once, but not in order.
// A consumer runs every event through a Sequencer, inside its inbox
// transaction, and the event's declared strategy (events.StrategyOf)
// decides when the event's inbox step runs:
//
//   - StateTransition (every event of the saga): at once. The handler's
//     conditional UPDATE on the legal prior states is the ordering guard, so
//     a late event can never move a finished aggregate back.
//   - Delta: strictly in aggregate_version order (delta.go). The next
//     version applies, then every parked successor that is now next; a
//     version ahead of a gap is parked with a deadline; a version at or
//     below the last applied one is recorded, not applied.
//   - Snapshot: only when newer than the version applied (snapshot.go); an
//     older one is recorded, not applied, and counted as stale.
//
// Both compare versions per consumer and aggregate, the aggregate being its
// type (the producer that numbers the versions) and its id (sequence.go).
//
// The seam with the inbox is Steps: the consumer hands over its two ways of
// taking an event inside the transaction it opened (apply: inbox row and
// business change; record: inbox row only), and the Sequencer calls them in
// the right order, using the same transaction for its own tables
// (inbox_sequences, parked_events). It opens no transaction and commits
// nothing, so several events can share one.
package ordering

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/events"
)

// Steps are the consumer's two ways of taking an event inside its
// transaction.
type Steps struct {
	// Apply claims the event in the inbox and makes its business change
	// (with the consumer's own outbox events).
	Apply func(e events.Envelope) error
	// Record only claims it in the inbox: a stale copy, done but not
	// applied.
	Record func(e events.Envelope) error
}

// Result is what InOrder did besides applying e.
type Result struct {
	// Parked: e waits for an earlier version of its aggregate; nothing was
	// applied or claimed. Commit (the parked row is the waiting task), then
	// acknowledge the message.
	Parked bool
	// Unparked counts the parked successors applied after e.
	Unparked int
	// Stale: e was not newer than the version applied; it was recorded in
	// the inbox, not applied. Commit, acknowledge and count it.
	Stale bool
}

// ErrParked is the consumer's answer for a parked event: it waits for an
// earlier version of its aggregate, committed as a waiting task, not
// processed. Acknowledge the message.
var ErrParked = errors.New("event parked until the earlier versions of its aggregate arrive")

// ErrAlreadyParked means e is already waiting in the parked table: a
// redelivery, so a duplicate. Roll back and acknowledge the message.
var ErrAlreadyParked = errors.New("event already parked")

// DefaultParkDeadline is how long a parked delta may wait for its gap.
const DefaultParkDeadline = 5 * time.Minute

// Sequencer applies one consumer's events in the order their strategy
// needs.
type Sequencer struct {
	Consumer     string        // the consumer_name: sequences and parked rows are per consumer
	ParkDeadline time.Duration // how long a delta may wait for its gap [DefaultParkDeadline]
	Log          *slog.Logger  // nil: slog.Default()
}

// InOrder runs e's steps inside tx as its strategy requires.
func (s *Sequencer) InOrder(ctx context.Context, tx *sqlx.Tx, e events.Envelope, steps Steps) (Result, error) {
	switch strategy := events.StrategyOf(e.Type); strategy {
	case events.Delta, events.Snapshot:
		return s.versioned(ctx, tx, e, strategy, steps)
	default: // StateTransition: the handler's conditional UPDATE decides
		return Result{}, steps.Apply(e)
	}
}
