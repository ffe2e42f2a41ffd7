// Package orderdb is the order service's SQL: the catalogue, orders and
// their lines. Row structs stay here; callers get domain types.
package orderdb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/services/order/internal/order"
)

// ErrDuplicateKey: an order with this idempotency key already exists.
var ErrDuplicateKey = errors.New("idempotency key already used")

type orderRow struct {
	ID             uint64     `db:"id"`
	IdempotencyKey *string    `db:"idempotency_key"` // NULL once forgotten (ForgetCreateKeys)
	RequestHash    string     `db:"request_hash"`
	CustomerID     string     `db:"customer_id"`
	Status         string     `db:"status"`
	StatusReason   string     `db:"status_reason"`
	RefundStatus   string     `db:"refund_status"`
	TotalCents     int64      `db:"total_cents"`
	Currency       string     `db:"currency"`
	Version        uint64     `db:"aggregate_version"`
	CreatedAt      time.Time  `db:"created_at"`
	UpdatedAt      time.Time  `db:"updated_at"`
	DeadlineAt     *time.Time `db:"deadline_at"`
}

const orderColumns = `id, idempotency_key, request_hash, customer_id, status, status_reason,
  refund_status, total_cents, currency, aggregate_version, created_at, updated_at, deadline_at`

func (r orderRow) domain() order.Order {
	o := order.Order{
		ID: r.ID, CustomerID: r.CustomerID, Status: order.Status(r.Status), StatusReason: r.StatusReason,
		RefundStatus: order.RefundStatus(r.RefundStatus), TotalCents: r.TotalCents, Currency: r.Currency,
		Version: r.Version, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
	if r.DeadlineAt != nil {
		o.DeadlineAt = *r.DeadlineAt
	}
	return o
}

// deadlineArg turns "how long from now" into the argument of
// TIMESTAMPADD(MICROSECOND, ?, NOW(6)): NULL (no deadline) for 0, so the
// statement clears deadline_at. Deadlines are counted in database time, the
// clock the sweep compares them with.
func deadlineArg(d time.Duration) any {
	if d <= 0 {
		return nil
	}
	return d.Microseconds()
}

// Catalogue returns the products with these SKUs (missing ones are absent)
// and the database clock as it read them: the new order's creation time,
// so that the create needs no read-back of its server-set times (now is
// zero when no SKU matched; such a request does not price).
func Catalogue(ctx context.Context, db sqlx.QueryerContext, skus []string) (products map[string]order.Product, now time.Time, err error) {
	const q = `SELECT sku, price_cents, currency, NOW(6) AS now FROM products WHERE sku IN (?)`
	var rows []struct {
		SKU        string    `db:"sku"`
		PriceCents int64     `db:"price_cents"`
		Currency   string    `db:"currency"`
		Now        time.Time `db:"now"`
	}
	if err := sqldb.SelectIn(ctx, db, &rows, q, skus); err != nil {
		return nil, time.Time{}, fmt.Errorf("catalogue: %w", err)
	}
	products = make(map[string]order.Product, len(rows))
	for _, r := range rows {
		products[r.SKU] = order.Product{SKU: r.SKU, PriceCents: r.PriceCents, Currency: r.Currency}
		now = r.Now
	}
	return products, now, nil
}

// InsertOrder inserts a new order with its first event version and its
// times as given: o.CreatedAt, o.UpdatedAt and o.DeadlineAt (zero for
// none), in database time (Catalogue's now), so that the caller knows
// the stored times without reading them back. A duplicate idempotency key
// returns ErrDuplicateKey: the unique key, not a prior SELECT, decides who
// created the order, so concurrent retries of one request create one order.
func InsertOrder(ctx context.Context, tx *sqlx.Tx, key, hash string, o order.Order) (uint64, error) {
	const q = `INSERT INTO orders
  (idempotency_key, request_hash, customer_id, status, total_cents, currency, aggregate_version,
   created_at, updated_at, deadline_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	if o.CreatedAt.IsZero() || o.UpdatedAt.IsZero() {
		return 0, errors.New("insert order: no creation time")
	}
	var deadline *time.Time
	if !o.DeadlineAt.IsZero() {
		deadline = &o.DeadlineAt
	}
	res, err := tx.ExecContext(ctx, q, key, hash, o.CustomerID, o.Status, o.TotalCents, o.Currency, o.Version,
		o.CreatedAt, o.UpdatedAt, deadline)
	if sqldb.IsDuplicateKey(err) {
		return 0, ErrDuplicateKey
	}
	if err != nil {
		return 0, fmt.Errorf("insert order: %w", err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("insert order: %w", err)
	}
	return uint64(id), nil
}

// InsertItems inserts the order's lines.
func InsertItems(ctx context.Context, tx *sqlx.Tx, orderID uint64, items []order.Item) error {
	const q = `INSERT INTO order_items (order_id, sku, quantity, unit_price_cents) VALUES `
	args := make([]any, 0, 4*len(items))
	for _, it := range items {
		args = append(args, orderID, it.SKU, it.Quantity, it.UnitPriceCents)
	}
	if _, err := tx.ExecContext(ctx, q+sqldb.Values("(?, ?, ?, ?)", len(items)), args...); err != nil {
		return fmt.Errorf("insert order items: %w", err)
	}
	return nil
}

// GetByKey returns the order created with an idempotency key and the hash of
// the request that created it.
func GetByKey(ctx context.Context, db sqlx.QueryerContext, key string) (order.Order, string, error) {
	const q = `SELECT ` + orderColumns + ` FROM orders WHERE idempotency_key = ?`
	return getWithItems(ctx, db, q, key, "get order by key")
}

// Get returns one order with its lines.
func Get(ctx context.Context, db sqlx.QueryerContext, id uint64) (order.Order, error) {
	const q = `SELECT ` + orderColumns + ` FROM orders WHERE id = ?`
	o, _, err := getWithItems(ctx, db, q, id, "get order %d", id)
	return o, err
}

// getWithItems reads the one order q finds by arg, with its lines and the
// hash of the request that created it; what (with its args) names the read
// in an error.
func getWithItems(ctx context.Context, db sqlx.QueryerContext, q string, arg any, what string, args ...any) (order.Order, string, error) {
	var r orderRow
	if err := sqlx.GetContext(ctx, db, &r, q, arg); err != nil {
		return order.Order{}, "", sqldb.NoRowsAs(err, order.ErrNotFound, what, args...)
	}
	o := r.domain()
	items, err := Items(ctx, db, o.ID)
	o.Items = items
	return o, r.RequestHash, err
}

// Lock reads an order and locks its row until the transaction ends, so the
// decision made from it cannot race another event for the same order.
func Lock(ctx context.Context, tx *sqlx.Tx, id uint64) (order.Order, error) {
	const q = `SELECT ` + orderColumns + ` FROM orders WHERE id = ? FOR UPDATE`
	var r orderRow
	if err := tx.GetContext(ctx, &r, q, id); err != nil {
		return order.Order{}, sqldb.NoRowsAs(err, order.ErrNotFound, "lock order %d", id)
	}
	return r.domain(), nil
}

// LockAll reads and locks the orders with these ids in one statement, in id
// order (the primary key's), until the transaction ends: the orders of a
// consumer batch. Missing ids are absent from the result.
func LockAll(ctx context.Context, tx *sqlx.Tx, ids []uint64) (map[uint64]order.Order, error) {
	const q = `SELECT ` + orderColumns + ` FROM orders WHERE id IN (?) ORDER BY id FOR UPDATE`
	out, err := sqldb.SelectInMap(ctx, tx, func(r orderRow) (uint64, order.Order) { return r.ID, r.domain() }, q, ids)
	if err != nil {
		return nil, fmt.Errorf("lock %d orders: %w", len(ids), err)
	}
	return out, nil
}

// Items returns an order's lines.
func Items(ctx context.Context, db sqlx.QueryerContext, id uint64) ([]order.Item, error) {
	const q = `SELECT sku, quantity, unit_price_cents FROM order_items WHERE order_id = ? ORDER BY sku`
	var rows []struct {
		SKU            string `db:"sku"`
		Quantity       int    `db:"quantity"`
		UnitPriceCents int64  `db:"unit_price_cents"`
	}
	if err := sqlx.SelectContext(ctx, db, &rows, q, id); err != nil {
		return nil, fmt.Errorf("order items %d: %w", id, err)
	}
	items := make([]order.Item, len(rows))
	for i, r := range rows {
		items[i] = order.Item{SKU: r.SKU, Quantity: r.Quantity, UnitPriceCents: r.UnitPriceCents}
	}
	return items, nil
}

// List returns orders, newest first, optionally of one status, with ids
// below beforeID (0: from the newest) for paging.
func List(ctx context.Context, db sqlx.QueryerContext, status order.Status, beforeID uint64, limit int) ([]order.Order, error) {
	q := `SELECT ` + orderColumns + ` FROM orders WHERE 1 = 1`
	var args []any
	if status != "" {
		q += ` AND status = ?`
		args = append(args, status)
	}
	if beforeID > 0 {
		q += ` AND id < ?`
		args = append(args, beforeID)
	}
	q += ` ORDER BY id DESC LIMIT ?`
	args = append(args, limit)
	var rows []orderRow
	if err := sqlx.SelectContext(ctx, db, &rows, q, args...); err != nil {
		return nil, fmt.Errorf("list orders: %w", err)
	}
	out := make([]order.Order, len(rows))
	for i, r := range rows {
		out[i] = r.domain()
	}
	return out, nil
}

// AdvanceVersion records that the order emitted an event without a change
// of status (the reconciler's correction): the version only, under the
// row lock the caller holds; compare-and-set on the version read. updated_at
// stays, because it is the time of the last status change, which the
// reconciler's grace, its closed checks and its count of repairs are
// measured from.
func AdvanceVersion(ctx context.Context, tx *sqlx.Tx, id, from, to uint64) (bool, error) {
	const q = `UPDATE orders SET aggregate_version = ? WHERE id = ? AND aggregate_version = ?`
	res, err := tx.ExecContext(ctx, q, to, id, from)
	return sqldb.Changed(res, err, "order %d version %d -> %d", id, from, to)
}

// Transition moves an order from one status to another, records the
// version of the event the move emits (unchanged when it emits none) and
// sets the deadline of the new status in the same statement (deadline from
// now; 0 clears it). Compare-and-set: the WHERE restates the status the
// decision was made on; zero rows changed means the order moved meanwhile,
// and that is returned as false, not as success.
func Transition(ctx context.Context, tx *sqlx.Tx, id uint64, from, to order.Status, refund order.RefundStatus, reason string,
	version uint64, deadline time.Duration) (bool, error) {
	const q = `UPDATE orders
SET status = ?, refund_status = ?, status_reason = ?, aggregate_version = ?, updated_at = NOW(6),
    deadline_at = TIMESTAMPADD(MICROSECOND, ?, NOW(6))
WHERE id = ? AND status = ?`
	res, err := tx.ExecContext(ctx, q, to, refund, reason, version, deadlineArg(deadline), id, from)
	return sqldb.Changed(res, err, "order %d %s -> %s", id, from, to)
}
