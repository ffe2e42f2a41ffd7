package orderapp

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
)

// historyBatch collects the order_history rows of the events of one
// consumer batch (pkg/inbox, HandleBatch) and writes them in one INSERT
// after the last handler. The batch writes its outbox rows after that
// (outbox.Collect), so the history still comes before the events it
// emitted, the order of the timeline; a batch that rolls back leaves
// neither.
type historyBatch struct {
	changes []orderdb.Change // in the order the handlers made them
}

type historyBatchKey struct{}

// recordChange writes the order_history row of a change: now when the
// event runs alone (or the change is not a consumer's), with the rest of
// its batch when it runs in one.
func recordChange(ctx context.Context, tx *sqlx.Tx, c orderdb.Change) error {
	f, ok := inbox.Shared(ctx, historyBatchKey{}, func() inbox.Finisher { return &historyBatch{} })
	if !ok {
		return orderdb.InsertChange(ctx, tx, c)
	}
	b := f.(*historyBatch)
	b.changes = append(b.changes, c)
	return nil
}

// Finish writes the batch's history rows.
func (b *historyBatch) Finish(ctx context.Context, tx *sqlx.Tx) error {
	return orderdb.InsertChanges(ctx, tx, b.changes)
}
