package inbox_test

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// The call sequence of a consumer: a handler that changes business state
// and writes its result event on the inbox transaction, and a consume loop
// that acks only after the commit.
func Example() {
	ctx := context.Background()
	var db *sqlx.DB
	var conn *rabbit.Conn
	var dispatcher *outbox.Dispatcher

	reserve := func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
		p, err := events.Decode[events.OrderCreatedV1](e.Payload) // invalid: dead letter
		if err != nil {
			return err
		}
		// ... conditional UPDATE stock ... on tx ...
		_, err = outbox.Add(ctx, tx, outbox.Event{AggregateID: p.OrderID, AggregateVersion: 1,
			Type: events.InventoryReserved, Payload: events.InventoryReservedV1{OrderID: p.OrderID /* ... */}})
		return err
	}
	c := inbox.NewConsumer(inbox.Config{
		Name:        "inventory", // part of the inbox key: never rename
		DB:          db,
		Handlers:    map[events.Type]inbox.Handler{events.OrderCreated: reserve},
		AfterCommit: dispatcher.Wake,
		// Events older than this are dead letters (INBOX_RETENTION).
		ReplayWindow: inbox.DefaultReplayWindow,
	})
	_ = conn.Consume(ctx, rabbit.ConsumeConfig{Queue: "inventory.order-events"}, c.Handle)
}
