package inbox

import (
	"context"
	"errors"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/failpoint"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/sqldb"
	"github.com/relmsg/ordersaga/pkg/wrongway"
)

// The wrong ways of this package, for the lab (pkg/wrongway, demo mode
// only). None is reached from the chapter's path: they are handlers of
// their own, which the process wires in place of Handle while their switch
// is on (WrongWays). The right way is commit: the inbox row and the effect
// in one transaction, then the ACK.

// WrongWays are this consumer's wrong ways, each a rabbit.Handler to take
// instead of Handle while its switch is on (wrongway.Pick).
func (c *Consumer) WrongWays() []wrongway.Alt[rabbit.Handler] {
	stepInstead := func(step commitStep) rabbit.Handler {
		return func(ctx context.Context, d rabbit.Delivery) rabbit.Decision {
			c.Arrived(d)
			return c.handle(ctx, d, step)
		}
	}
	return []wrongway.Alt[rabbit.Handler]{
		{Switch: wrongway.AckBeforeCommit, Way: c.handleAckFirst},
		{Switch: wrongway.NoInbox, Way: stepInstead(c.commitCheckThenInsert)},
		{Switch: wrongway.DedupeOwnTx, Way: stepInstead(c.commitDedupeFirst)},
	}
}

// handleAckFirst is the wrong way of Handle (wrongway.AckBeforeCommit): the
// message is acked, then processed. If processing fails, nothing brings it
// back: the event is lost.
func (c *Consumer) handleAckFirst(ctx context.Context, d rabbit.Delivery) rabbit.Decision {
	c.Arrived(d)
	if err := d.Ack(false); err != nil {
		return rabbit.AlreadyAcked()
	}
	e, err := d.Envelope()
	if err == nil {
		err = c.Process(ctx, e)
	}
	if err != nil && !errors.Is(err, ErrAlreadyProcessed) {
		c.cfg.Log.Error("processing failed after the message was acked: the event is lost",
			"consumer", c.cfg.Name, "event_id", d.MessageId, "err", err)
	}
	return rabbit.AlreadyAcked()
}

// commitCheckThenInsert is the wrong way of commit (wrongway.NoInbox):
// "SELECT, and if absent, process and record". Two deliveries at once both
// see "absent" and both apply the effect; INSERT IGNORE then hides the
// clash.
func (c *Consumer) commitCheckThenInsert(ctx context.Context, e events.Envelope, h Handler) error {
	done, _, err := lookup(ctx, c.cfg.DB, c.cfg.Name, e.EventID)
	if err != nil {
		return err
	}
	if done {
		return ErrAlreadyProcessed
	}
	if err := failpoint.Inject(ctx, "inbox.after-claim"); err != nil {
		return err
	}
	err = sqldb.WithTx(ctx, c.cfg.DB, func(tx *sqlx.Tx) error {
		if err := h(ctx, tx, e); err != nil {
			return err
		}
		const q = `INSERT IGNORE INTO consumer_inbox (consumer_name, event_id) VALUES (?, ?)`
		_, err := tx.ExecContext(ctx, q, c.cfg.Name, e.EventID)
		return err
	})
	if err == nil && c.cfg.AfterCommit != nil {
		c.cfg.AfterCommit()
	}
	return err
}

// commitDedupeFirst is the wrong way of commit (wrongway.DedupeOwnTx),
// the chapter's third ACK pitfall (只写去重记录，再单独处理业务): the inbox
// row is committed in a transaction of its own, then the effect is applied
// in another. A crash between the two commits leaves the event recorded as
// processed with its effect missing; the broker redelivers the unacked
// message and the inbox, finding the row, drops it as a duplicate.
func (c *Consumer) commitDedupeFirst(ctx context.Context, e events.Envelope, h Handler) error {
	err := sqldb.WithTx(ctx, c.cfg.DB, func(tx *sqlx.Tx) error {
		return ClaimPayload(ctx, tx, c.cfg.Name, e.EventID, e.Payload)
	})
	if err != nil {
		return err
	}
	// The same window as the right way's: the inbox row written, the
	// effect not yet; only here the row is already committed.
	if err := failpoint.Inject(ctx, "inbox.after-claim"); err != nil {
		return err
	}
	err = sqldb.WithTx(ctx, c.cfg.DB, func(tx *sqlx.Tx) error { return h(ctx, tx, e) })
	if err == nil && c.cfg.AfterCommit != nil {
		c.cfg.AfterCommit()
	}
	return err
}
