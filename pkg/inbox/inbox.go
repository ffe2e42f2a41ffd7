package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/sqldb"
)

// ErrAlreadyProcessed means this consumer already committed this event: roll
// back the attempt and ACK the message.
var ErrAlreadyProcessed = errors.New("event already processed by this consumer")

// Claim records that consumer processes eventID, inside tx, before the
// business change. It must be a plain INSERT: the primary key
// (consumer_name, event_id) is what coordinates two deliveries racing on one
// event; the second blocks until the first commits (then gets a duplicate
// key: ErrAlreadyProcessed) or rolls back (then it proceeds). INSERT IGNORE
// would hide other errors and, outside strict mode, truncate a long id.
//
// Only the duplicate key of this statement means "already processed": any
// other error, including a duplicate key raised later by the business SQL,
// is a failure of the attempt.
func Claim(ctx context.Context, tx *sqlx.Tx, consumer, eventID string) error {
	const q = `INSERT INTO consumer_inbox (consumer_name, event_id) VALUES (?, ?)`
	_, err := tx.ExecContext(ctx, q, consumer, eventID)
	switch {
	case err == nil:
		return nil
	case sqldb.IsDuplicateKey(err):
		return ErrAlreadyProcessed
	default:
		return fmt.Errorf("inbox claim %s/%s: %w", consumer, eventID, err)
	}
}

// Processed reports whether consumer has committed eventID.
func Processed(ctx context.Context, db sqlx.QueryerContext, consumer, eventID string) (bool, error) {
	const q = `SELECT EXISTS (SELECT 1 FROM consumer_inbox WHERE consumer_name = ? AND event_id = ?)`
	var ok bool
	if err := sqlx.GetContext(ctx, db, &ok, q, consumer, eventID); err != nil {
		return false, fmt.Errorf("inbox lookup: %w", err)
	}
	return ok, nil
}
