package outbox

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/aids/wrongway"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
)

// The wrong way of this package, for the lab's lease-expiry experiment
// (pkg/aids/wrongway; demo mode only): the dispatcher's mark-sent step is picked
// per batch (Dispatcher.mark), the right way being markSent in store.go.

var wrongWays = []wrongway.Alt[markFunc]{{Switch: wrongway.MarkSentWithoutToken, Way: markSentIgnoringClaim}}

// markSentIgnoringClaim is the wrong way (wrongway.MarkSentWithoutToken):
// it marks by event id alone, without "status = 'sending' AND claim_token =
// ?", so a dispatcher whose lease expired overwrites the claim of the one
// that took the rows over, and neither notices.
func markSentIgnoringClaim(ctx context.Context, db sqlx.ExecerContext, _ string, ids []string) (int64, error) {
	const q = `UPDATE outbox_events
SET status = 'sent', sent_at = NOW(6), claim_token = NULL, lease_until = NULL
WHERE event_id IN (?)`
	res, err := sqldb.ExecIn(ctx, db, q, ids)
	if err != nil {
		return 0, fmt.Errorf("mark sent: %w", err)
	}
	return res.RowsAffected()
}
