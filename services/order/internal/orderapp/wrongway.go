package orderapp

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/wrongway"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
)

// The wrong way of this package, for the lab's atomic-commit experiment
// (pkg/wrongway; demo mode only). Create reaches it by one switch; the right
// way is insertCreated: the event is an outbox row of the order's own
// transaction.

// WrongWay wires the wrong-way switches: while publish-before-commit is on,
// Create publishes OrderCreated with publish inside its transaction, before
// COMMIT, and writes no outbox row.
func (a *App) WrongWay(set *wrongway.Set, publish func(ctx context.Context, e events.Envelope) error) {
	a.wrong, a.publishNow = set, publish
}

// publishBeforeCommit is the wrong way of Create's event
// (wrongway.PublishBeforeCommit): OrderCreated leaves for the broker now,
// before we know the order will commit, and the step it returns writes only
// the history row, no outbox row. If the transaction then rolls back, the
// saga runs for an order that does not exist.
func (a *App) publishBeforeCommit(ctx context.Context, p events.OrderCreatedV1) (
	func(context.Context, *sqlx.Tx, orderdb.Change, events.OrderCreatedV1) error, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	err = a.publishNow(ctx, events.Envelope{EventID: id.String(), Type: events.OrderCreated,
		AggregateID: p.OrderID, AggregateVersion: 1, SchemaVersion: events.CurrentSchemaVersion,
		CorrelationID: fmt.Sprint(p.OrderID), OccurredAt: time.Now().UTC(), Payload: body})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, tx *sqlx.Tx, change orderdb.Change, _ events.OrderCreatedV1) error {
		return orderdb.InsertChange(ctx, tx, change)
	}, nil
}
