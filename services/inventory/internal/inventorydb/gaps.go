package inventorydb

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/sqldb"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
)

// --- event gaps ---

type gapRow struct {
	ID              uint64       `db:"id"`
	Consumer        string       `db:"consumer_name"`
	OrderID         uint64       `db:"aggregate_id"`
	EventID         string       `db:"event_id"`
	EventType       string       `db:"event_type"`
	ReceivedVersion uint64       `db:"received_version"`
	ExpectedVersion uint64       `db:"expected_version"`
	DetectedAt      time.Time    `db:"detected_at"`
	DeadlineAt      time.Time    `db:"deadline_at"`
	AlertedAt       sql.NullTime `db:"alerted_at"`
	ResolvedAt      sql.NullTime `db:"resolved_at"`
	Resolution      string       `db:"resolution"`
	Overdue         bool         `db:"overdue"`
}

// gapColumns computes overdue in database time, like every deadline here.
const gapColumns = `id, consumer_name, aggregate_id, event_id, event_type, received_version, expected_version,
  detected_at, deadline_at, alerted_at, resolved_at, resolution,
  (resolved_at IS NULL AND deadline_at < NOW(6)) AS overdue`

func (r gapRow) domain() inventory.Gap {
	return inventory.Gap{ID: r.ID, Consumer: r.Consumer, OrderID: r.OrderID, EventID: r.EventID, EventType: r.EventType,
		ReceivedVersion: r.ReceivedVersion, ExpectedVersion: r.ExpectedVersion, DetectedAt: r.DetectedAt,
		DeadlineAt: r.DeadlineAt, AlertedAt: r.AlertedAt.Time, ResolvedAt: r.ResolvedAt.Time,
		Resolution: r.Resolution, Overdue: r.Overdue}
}

func gaps(rows []gapRow) []inventory.Gap {
	out := make([]inventory.Gap, len(rows))
	for i, r := range rows {
		out[i] = r.domain()
	}
	return out
}

// InsertGap records a gap in the caller's transaction (the inbox
// transaction of the event that revealed it), due deadline after the
// database's NOW(6). The key (consumer, order, expected version) makes it
// idempotent: a gap already recorded is left as it is and reported as
// false.
func InsertGap(ctx context.Context, tx *sqlx.Tx, g inventory.Gap, deadline time.Duration) (bool, error) {
	const q = `INSERT INTO event_gaps
  (consumer_name, aggregate_id, event_id, event_type, received_version, expected_version, deadline_at)
VALUES (?, ?, ?, ?, ?, ?, DATE_ADD(NOW(6), INTERVAL ? MICROSECOND))
ON DUPLICATE KEY UPDATE id = id`
	res, err := tx.ExecContext(ctx, q, g.Consumer, g.OrderID, g.EventID, g.EventType, g.ReceivedVersion,
		g.ExpectedVersion, deadline.Microseconds())
	return sqldb.Changed(res, err, "record gap of order %d before version %d", g.OrderID, g.ReceivedVersion)
}

// ResolveGaps marks the open gaps of an order that were waiting for version
// as resolved, in the caller's transaction (the inbox transaction of the
// late event). It returns how many it resolved.
func ResolveGaps(ctx context.Context, tx *sqlx.Tx, consumer string, orderID, version uint64, resolution string) (int64, error) {
	const q = `UPDATE event_gaps SET resolved_at = NOW(6), resolution = ?
WHERE consumer_name = ? AND aggregate_id = ? AND expected_version = ? AND resolved_at IS NULL`
	res, err := tx.ExecContext(ctx, q, inventory.ClipReason(resolution), consumer, orderID, version)
	if err != nil {
		return 0, fmt.Errorf("resolve gaps of order %d: %w", orderID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("resolve gaps of order %d: %w", orderID, err)
	}
	return n, nil
}

// ResolveGap is an operator closing an open gap by hand. False means there
// is no open gap with that id.
func ResolveGap(ctx context.Context, db sqlx.ExecerContext, id uint64, resolution string) (bool, error) {
	const q = `UPDATE event_gaps SET resolved_at = NOW(6), resolution = ? WHERE id = ? AND resolved_at IS NULL`
	res, err := db.ExecContext(ctx, q, inventory.ClipReason(resolution), id)
	return sqldb.Changed(res, err, "resolve gap %d", id)
}

// GetGap returns one gap, or inventory.ErrNoGap.
func GetGap(ctx context.Context, db sqlx.QueryerContext, id uint64) (inventory.Gap, error) {
	const q = `SELECT ` + gapColumns + ` FROM event_gaps WHERE id = ?`
	var r gapRow
	if err := sqlx.GetContext(ctx, db, &r, q, id); err != nil {
		return inventory.Gap{}, sqldb.NoRowsAs(err, inventory.ErrNoGap, "get gap %d", id)
	}
	return r.domain(), nil
}

// ListGaps returns up to limit gaps, newest first; openOnly leaves out the
// resolved ones.
func ListGaps(ctx context.Context, db sqlx.QueryerContext, openOnly bool, limit int) ([]inventory.Gap, error) {
	q := `SELECT ` + gapColumns + ` FROM event_gaps`
	if openOnly {
		q += ` WHERE resolved_at IS NULL`
	}
	q += ` ORDER BY id DESC LIMIT ?`
	var rows []gapRow
	if err := sqlx.SelectContext(ctx, db, &rows, q, limit); err != nil {
		return nil, fmt.Errorf("list gaps: %w", err)
	}
	return gaps(rows), nil
}

// OrderGaps returns the gaps recorded for one order, oldest first.
func OrderGaps(ctx context.Context, db sqlx.QueryerContext, orderID uint64) ([]inventory.Gap, error) {
	const q = `SELECT ` + gapColumns + ` FROM event_gaps WHERE aggregate_id = ? ORDER BY id`
	var rows []gapRow
	if err := sqlx.SelectContext(ctx, db, &rows, q, orderID); err != nil {
		return nil, fmt.Errorf("gaps of order %d: %w", orderID, err)
	}
	return gaps(rows), nil
}

// OverdueNotAlerted returns up to limit open gaps past their deadline that
// no gap check has logged yet.
func OverdueNotAlerted(ctx context.Context, db sqlx.QueryerContext, limit int) ([]inventory.Gap, error) {
	const q = `SELECT ` + gapColumns + ` FROM event_gaps
WHERE resolved_at IS NULL AND deadline_at < NOW(6) AND alerted_at IS NULL
ORDER BY deadline_at, id LIMIT ?`
	var rows []gapRow
	if err := sqlx.SelectContext(ctx, db, &rows, q, limit); err != nil {
		return nil, fmt.Errorf("overdue gaps: %w", err)
	}
	return gaps(rows), nil
}

// MarkAlerted claims the alert of an overdue gap: compare-and-set on
// alerted_at IS NULL, so with several instances exactly one logs it.
func MarkAlerted(ctx context.Context, db sqlx.ExecerContext, id uint64) (bool, error) {
	const q = `UPDATE event_gaps SET alerted_at = NOW(6) WHERE id = ? AND alerted_at IS NULL AND resolved_at IS NULL`
	res, err := db.ExecContext(ctx, q, id)
	return sqldb.Changed(res, err, "mark gap %d alerted", id)
}

// --- counts for the metrics ---

// Counts are the numbers the service's metrics show, read from the tables
// so that every instance reports the same truth and a restart loses
// nothing.
type Counts struct {
	Expired      int64 `db:"expired"`       // reservations whose lease ever ran out
	CommitFailed int64 `db:"commit_failed"` // reservations in commit_failed
	Rejected     int64 `db:"rejected"`      // business rejections: not enough stock, unknown SKU
	PastLease    int64 `db:"past_lease"`    // still reserved with the lease over: the sweep is behind
	GapsOpen     int64 `db:"gaps_open"`     // open gaps within their deadline
	GapsOverdue  int64 `db:"gaps_overdue"`  // open gaps past their deadline
}

// ReadCounts reads Counts in one statement (one snapshot of the clock).
func ReadCounts(ctx context.Context, db sqlx.QueryerContext) (Counts, error) {
	const q = `SELECT
  (SELECT COUNT(*) FROM reservations WHERE expired_at IS NOT NULL) AS expired,
  (SELECT COUNT(*) FROM reservations WHERE status = ?) AS commit_failed,
  (SELECT COUNT(*) FROM reservations WHERE status = ?) AS rejected,
  (SELECT COUNT(*) FROM reservations WHERE status = ? AND expires_at < NOW(6)) AS past_lease,
  (SELECT COUNT(*) FROM event_gaps WHERE resolved_at IS NULL AND deadline_at >= NOW(6)) AS gaps_open,
  (SELECT COUNT(*) FROM event_gaps WHERE resolved_at IS NULL AND deadline_at < NOW(6)) AS gaps_overdue`
	var c Counts
	if err := sqlx.GetContext(ctx, db, &c, q, inventory.CommitFailed, inventory.Rejected, inventory.Reserved); err != nil {
		return Counts{}, fmt.Errorf("read counts: %w", err)
	}
	return c, nil
}

// ForgetGap deletes the gap the event eventID recorded for consumer, in
// the caller's transaction: only the lab's wrong way (wrongway.IgnoreOrder)
// keeps no gap books.
func ForgetGap(ctx context.Context, tx *sqlx.Tx, consumer, eventID string) error {
	const q = `DELETE FROM event_gaps WHERE consumer_name = ? AND event_id = ? AND resolved_at IS NULL`
	if _, err := tx.ExecContext(ctx, q, consumer, eventID); err != nil {
		return fmt.Errorf("forget the gap of %s: %w", eventID, err)
	}
	return nil
}
