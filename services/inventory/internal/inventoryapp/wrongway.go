package inventoryapp

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/failpoint"
	"github.com/relmsg/ordersaga/pkg/sqldb"
	"github.com/relmsg/ordersaga/pkg/wrongway"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorydb"
)

// The wrong ways of this package, for the lab (pkg/wrongway; demo mode
// only). The saga handlers reach the out-of-order experiment's by one
// switch each: OnOrderCreated forgets the cancel's marker, OnOrderCancelled
// keeps no gap books. ReserveNow serves the order service's sync-reserve
// switch (the demo endpoint POST /debug/reservations).

// ignoringOrder reports whether the wrong way of wrongway.IgnoreOrder is on:
// OnOrderCreated then disregards the marker a cancel left for an order it
// had not seen, so a create that arrives after its cancel reserves stock for
// a cancelled order, and no later event will ever release it (a "hanging"
// reservation). The cancel records no gap either: the wrong way does not
// look at order at all. Each handler reads it once, so one event sees one
// setting.
func (a *App) ignoringOrder() bool { return a.cfg.WrongWay.On(wrongway.IgnoreOrder) }

// forgetCancel is the wrong way of OnOrderCreated: it deletes the marker a
// cancel left for this order, so the create that follows finds the order id
// free and reserves, as if the cancel had never come.
func forgetCancel(ctx context.Context, tx *sqlx.Tx, orderID uint64) error {
	return inventorydb.DeleteMarker(ctx, tx, orderID)
}

// FailpointSyncReserveAfterCommit is the window of the synchronous reserve
// call: the reservation committed, the caller not answered yet.
const FailpointSyncReserveAfterCommit = "inventory.sync-reserve.after-commit"

func init() {
	failpoint.Register(FailpointSyncReserveAfterCommit, "the synchronous reserve call (sync-reserve, demo mode) committed the "+
		"reservation and has not answered yet: a caller that times out now is told the order failed while its stock is held")
}

// ReserveNow is the inventory side of the order service's wrong way
// wrongway.SyncReserve: the reserve step of OnOrderCreated, asked for by a
// synchronous HTTP call instead of the event. It runs in a transaction of
// its own (no inbox: the reservation's primary key, the order id, is the
// step's idempotency key, so a second call for one order reserves nothing
// more) and writes the same result event (InventoryReserved or
// InventoryRejected) to the outbox, so the saga goes on as usual. It
// answers the reservation as it stands: inventory's status, which is what
// a caller that timed out has to ask for (GET /reservations/{order_id}).
func (a *App) ReserveNow(ctx context.Context, p events.OrderCreatedV1) (inventory.Reservation, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return inventory.Reservation{}, err
	}
	e := events.Envelope{EventID: uuid.NewString(), Type: events.OrderCreated, AggregateID: p.OrderID,
		AggregateVersion: 1, SchemaVersion: events.CurrentSchemaVersion, Payload: body}
	if err := sqldb.WithTx(ctx, a.db, func(tx *sqlx.Tx) error { return a.OnOrderCreated(ctx, Direct(tx), e) }); err != nil {
		return inventory.Reservation{}, err
	}
	if a.cfg.Wake != nil {
		a.cfg.Wake()
	}
	// Window: reserved and committed, not answered. A caller whose timeout
	// ends now believes the order failed.
	if err := failpoint.Inject(ctx, FailpointSyncReserveAfterCommit); err != nil {
		return inventory.Reservation{}, err
	}
	return inventorydb.GetReservation(ctx, a.db, p.OrderID)
}
