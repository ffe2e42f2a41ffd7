package batch

import (
	"context"
	"log/slog"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/outbox"
)

// Each service writes its handlers once, against a store of its own
// (orderapp.Store, inventoryapp.Store, paymentapp.Store) made two ways
// (Handlers): Direct for one transaction, the chapter's way, Batched for a
// consumer batch. Three of a store's methods are the same in every
// service, and are here for the services' stores to embed: Tx, Emit and
// Log.

// Store is those three methods, for the services' store interfaces to
// embed; DirectStore and BatchedStore are its two ways.
type Store interface {
	// Tx is the transaction the handler runs in.
	Tx() *sqlx.Tx
	// Emit writes result events to the outbox: at once, or in a batch with
	// the batch's other events.
	Emit(ctx context.Context, evs ...outbox.Event) error
	// Log is the logger for what the handler did: in a batch its lines
	// wait for the COMMIT.
	Log(l *slog.Logger) *slog.Logger
}

// DirectStore is Tx, Emit and Log for one transaction: events go into the
// outbox at once, log lines are written at once.
type DirectStore struct{ tx *sqlx.Tx }

// NewDirectStore is the DirectStore of tx.
func NewDirectStore(tx *sqlx.Tx) DirectStore { return DirectStore{tx} }

// Tx is the transaction the handler runs in.
func (s DirectStore) Tx() *sqlx.Tx { return s.tx }

// Emit writes result events to the outbox, in the transaction.
func (s DirectStore) Emit(ctx context.Context, evs ...outbox.Event) error {
	_, err := outbox.Add(ctx, s.tx, evs...)
	return err
}

// Log is the handler's logger, l itself.
func (DirectStore) Log(l *slog.Logger) *slog.Logger { return l }

// BatchedStore is Tx, Emit and Log for a consumer batch: events wait for
// the batch's one outbox INSERT (Tx.Emit), log lines for its COMMIT
// (Tx.Log).
type BatchedStore struct{ B *Tx }

// Tx is the batch's transaction.
func (s BatchedStore) Tx() *sqlx.Tx { return s.B.Tx }

// Emit keeps result events for the batch's outbox INSERT.
func (s BatchedStore) Emit(ctx context.Context, evs ...outbox.Event) error {
	s.B.Emit(ctx, evs...)
	return nil
}

// Log is the handler's logger, its lines held until the batch commits.
func (s BatchedStore) Log(l *slog.Logger) *slog.Logger { return s.B.Log(l) }
