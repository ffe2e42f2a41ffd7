package inventoryapp

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/failpoint"
	"github.com/relmsg/ordersaga/pkg/inbox/batch"
	"github.com/relmsg/ordersaga/pkg/sqldb"
	"github.com/relmsg/ordersaga/pkg/wrongway"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventorydb"
)

// The wrong ways of this package, for the lab (pkg/wrongway; demo mode
// only). The out-of-order experiment's are handlers of their own, wired
// around the right ones by WrongWays; the right handlers know nothing of
// them. ReserveNow serves the order service's sync-reserve switch (the
// demo endpoint POST /debug/reservations).

// WrongWays is hs with the wrong way of wrongway.IgnoreOrder wired in: while
// the switch is on, a create first forgets the marker a cancel left for an
// order it had not seen, so a create that arrives after its cancel
// reserves stock for a cancelled order, and no later event will ever
// release it (a "hanging" reservation); a cancel that finds no reservation
// keeps no gap books. The wrong way does not look at order at all.
func (a *App) WrongWays(hs map[events.Type]batch.Handler[Store]) map[events.Type]batch.Handler[Store] {
	if a == nil || a.cfg.WrongWay == nil {
		return hs
	}
	type h = func(context.Context, Store, events.Envelope) error
	wrong := map[events.Type]h{events.OrderCreated: a.createIgnoringOrder, events.OrderCancelled: a.cancelIgnoringOrder}
	out := make(map[events.Type]batch.Handler[Store], len(hs))
	for t, right := range hs {
		out[t] = right
		if w, ok := wrong[t]; ok {
			out[t] = wrongway.Route(a.cfg.WrongWay, h(right), wrongway.Alt[h]{Switch: wrongway.IgnoreOrder, Way: w})
		}
	}
	return out
}

// createIgnoringOrder deletes the marker a cancel left for this order, so
// the create that follows finds the order id free and reserves, as if the
// cancel had never come.
func (a *App) createIgnoringOrder(ctx context.Context, s Store, e events.Envelope) error {
	if err := inventorydb.DeleteMarker(ctx, s.Tx(), e.AggregateID); err != nil {
		return err
	}
	return a.OnOrderCreated(ctx, s, e)
}

// cancelIgnoringOrder is the cancel without its gap books: the gap the
// right way records for a cancel that overtook its create is not kept.
func (a *App) cancelIgnoringOrder(ctx context.Context, s Store, e events.Envelope) error {
	if err := a.OnOrderCancelled(ctx, s, e); err != nil {
		return err
	}
	return inventorydb.ForgetGap(ctx, s.Tx(), a.cfg.Consumer, e.EventID)
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
