package outbox_test

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// The call sequence of a service: write the business change and its event
// in one transaction, wake the dispatcher after the commit, and run the
// dispatcher in the background.
func Example() {
	ctx := context.Background()
	var db *sqlx.DB       // sqldb.Open(...)
	var conn *rabbit.Conn // rabbit.New(...), running

	d := outbox.New(db, outbox.Config{
		Exchange:     "saga.events",
		NewPublisher: outbox.RabbitPublishers(conn),
	})
	go d.Run(ctx) // claim, publish, confirm, mark; recover expired leases

	err := sqldb.WithTx(ctx, db, func(tx *sqlx.Tx) error {
		// ... INSERT INTO orders ... on tx ...
		_, err := outbox.Add(ctx, tx, outbox.Event{
			AggregateID: 42, AggregateVersion: 1, Type: events.OrderCreated,
			Payload: events.OrderCreatedV1{OrderID: 42 /* ... */},
		})
		return err
	})
	if err == nil {
		d.Wake() // published within milliseconds, no polling delay
	}
}
