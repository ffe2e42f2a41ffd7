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

// The wrong ways of Create, for the lab (pkg/wrongway; demo mode only).
// Create reaches them by one switch read once per request
// (createWrongWay): emitWrongWay replaces the outbox row inside the
// transaction, afterCommitWrongWay does what the wrong way does after
// COMMIT. The right way is insertCreated: the event is an outbox row of the
// order's own transaction, and the dispatcher sends it.

// WrongWay wires the wrong-way switches and the direct publish the
// publish-before-commit and publish-after-commit switches use.
func (a *App) WrongWay(set *wrongway.Set, publish func(ctx context.Context, e events.Envelope) error) {
	a.wrong, a.publishNow = set, publish
}

// createWrongWay returns the wrong way Create takes, "" for none.
func (a *App) createWrongWay() wrongway.Switch {
	for _, sw := range []wrongway.Switch{wrongway.PublishBeforeCommit, wrongway.PublishAfterCommit, wrongway.SyncReserve} {
		if a.wrong.On(sw) {
			return sw
		}
	}
	return ""
}

// emitFunc writes the history row of a create, and its event if any.
type emitFunc func(ctx context.Context, tx *sqlx.Tx, change orderdb.Change, created events.OrderCreatedV1) error

// historyOnly is what every wrong way writes instead of insertCreated: the
// history row, no outbox row.
func historyOnly(ctx context.Context, tx *sqlx.Tx, change orderdb.Change, _ events.OrderCreatedV1) error {
	return orderdb.InsertChange(ctx, tx, change)
}

// emitWrongWay is the wrong ways' part inside the create's transaction: no
// outbox row. publish-before-commit (wrongway.PublishBeforeCommit) sends
// OrderCreated to the broker now, before we know the order will commit; if
// the transaction then rolls back, the saga runs for an order that does
// not exist.
func (a *App) emitWrongWay(ctx context.Context, sw wrongway.Switch, p events.OrderCreatedV1) (emitFunc, error) {
	if sw == wrongway.PublishBeforeCommit {
		e, err := createdEnvelope(p)
		if err != nil {
			return nil, err
		}
		if err := a.publishNow(ctx, e); err != nil {
			return nil, err
		}
	}
	return historyOnly, nil
}

// afterCommitWrongWay is the wrong ways' part after the create's COMMIT:
//
//   - publish-after-commit (wrongway.PublishAfterCommit) publishes
//     OrderCreated itself now. A crash between the COMMIT and this publish
//     (the failpoint before it) leaves an order that inventory never hears
//     of: nothing in any table says an event is owed (面试问答 1: 先写库).
//   - sync-reserve (wrongway.SyncReserve) asks inventory to reserve by a
//     synchronous HTTP call and waits for the answer, at most
//     syncReserveTimeout. When the answer is late the caller is told the
//     order failed, though inventory may have reserved (面试问答 7: 超时和
//     部分成功仍然存在).
func (a *App) afterCommitWrongWay(ctx context.Context, sw wrongway.Switch, p events.OrderCreatedV1) error {
	switch sw {
	case wrongway.PublishAfterCommit:
		e, err := createdEnvelope(p)
		if err != nil {
			return err
		}
		return a.publishNow(ctx, e)
	case wrongway.SyncReserve:
		return a.reserveNow(ctx, p)
	}
	return nil
}

// syncReserveTimeout is the wrong way's client timeout: shorter than a slow
// inventory's answer.
const syncReserveTimeout = time.Second

// reserveNow is sync-reserve's call. A timeout or any failure is answered as
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
