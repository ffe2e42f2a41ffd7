package orderapp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/web"
	"github.com/relmsg/ordersaga/pkg/wrongway"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
)

// The wrong ways of Create, for the lab (pkg/wrongway; demo mode only):
// createWays other than rightCreate, which WrongWay wires in. Each writes
// the history row and no outbox row inside the transaction (historyOnly),
// and gets OrderCreated to inventory its own wrong way.

// WrongWay wires the lab's wrong ways of Create, taken while their switch
// of set is on, and the direct publish two of them use.
func (a *App) WrongWay(set *wrongway.Set, publish func(ctx context.Context, e events.Envelope) error) {
	a.publishNow = publish
	historyOnly := func(ctx context.Context, tx *sqlx.Tx, change orderdb.Change, _ events.OrderCreatedV1) error {
		return orderdb.InsertChange(ctx, tx, change)
	}
	a.createWay = wrongway.Pick(set, rightCreate,
		// publish-before-commit sends OrderCreated to the broker inside the
		// transaction, before we know the order will commit; if the
		// transaction then rolls back, the saga runs for an order that
		// does not exist.
		wrongway.Alt[createWay]{Switch: wrongway.PublishBeforeCommit, Way: createWay{inTx: a.publishCreated, emit: historyOnly, afterCommit: nothingYet}},
		// publish-after-commit publishes it right after the COMMIT. A crash
		// between the COMMIT and this publish (the failpoint before it)
		// leaves an order that inventory never hears of: nothing in any
		// table says an event is owed (面试问答 1: 先写库).
		wrongway.Alt[createWay]{Switch: wrongway.PublishAfterCommit, Way: createWay{inTx: nothingYet, emit: historyOnly, afterCommit: a.publishCreated}},
		wrongway.Alt[createWay]{Switch: wrongway.SyncReserve, Way: createWay{inTx: nothingYet, emit: historyOnly, afterCommit: a.reserveNow}},
	)
}

// publishCreated publishes OrderCreated straight to the broker, with no
// outbox row: what the publishing wrong ways do instead of insertCreated.
func (a *App) publishCreated(ctx context.Context, p events.OrderCreatedV1) error {
	e, err := createdEnvelope(p)
	if err != nil {
		return err
	}
	return a.publishNow(ctx, e)
}

// syncReserveTimeout is the wrong way's client timeout: shorter than a slow
// inventory's answer.
const syncReserveTimeout = time.Second

// reserveNow is sync-reserve's call (wrongway.SyncReserve): the order
// service asks inventory to reserve by a synchronous HTTP call and waits
// for the answer, at most syncReserveTimeout. When the answer is late the
// caller is told the order failed, though inventory may have reserved
// (面试问答 7: 超时和部分成功仍然存在). A timeout or any failure is answered as
// the naive caller answers it: 504, "the order was not placed". Its order
// row stays pending_inventory, and what inventory did is only known by
// asking it (GET /reservations/{order_id}).
func (a *App) reserveNow(ctx context.Context, p events.OrderCreatedV1) error {
	if a.cfg.Peers == nil {
		return fmt.Errorf("sync-reserve: no inventory URL")
	}
	status, err := a.cfg.Peers.ReserveNow(ctx, p, syncReserveTimeout)
	if err != nil {
		a.log.WarnContext(ctx, "WRONG WAY sync-reserve: inventory did not answer in time; telling the caller the order failed",
			"order_id", p.OrderID, "timeout", syncReserveTimeout, "err", err)
		return web.Errorf(http.StatusGatewayTimeout, "inventory did not answer within %s: the order was not placed", syncReserveTimeout)
	}
	a.log.InfoContext(ctx, "WRONG WAY sync-reserve: inventory answered", "order_id", p.OrderID, "reservation", status)
	return nil
}

// createdEnvelope is OrderCreated as the wrong ways publish it themselves.
func createdEnvelope(p events.OrderCreatedV1) (events.Envelope, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return events.Envelope{}, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return events.Envelope{}, err
	}
	return events.Envelope{EventID: id.String(), Type: events.OrderCreated, AggregateID: p.OrderID,
		AggregateVersion: 1, SchemaVersion: events.CurrentSchemaVersion, CorrelationID: fmt.Sprint(p.OrderID),
		OccurredAt: time.Now().UTC(), Payload: body}, nil
}
