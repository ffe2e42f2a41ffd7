// Package inventorydb is the inventory service's SQL: stock, reservations
// with their items and leases, and the event gaps the consumer recorded.
// Every stock change is one conditional UPDATE whose WHERE states what must
// still be true (never read, compute, write back); the caller learns from
// rows affected whether it happened. Row structs stay here; callers get
// domain types.
package inventorydb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventory"
)

// ErrReservationExists: the order already has a reservation row. The
// primary key (order_id), not a prior SELECT, decides which event created
// it, so concurrent deliveries for one order reserve once.
var ErrReservationExists = errors.New("reservation already exists")

// --- stock ---

type stockRow struct {
	SKU       string    `db:"sku"`
	OnHand    int64     `db:"on_hand"`
	Reserved  int64     `db:"reserved"`
	UpdatedAt time.Time `db:"updated_at"`
}

func (r stockRow) domain() inventory.Stock {
	return inventory.Stock{SKU: r.SKU, OnHand: r.OnHand, Reserved: r.Reserved, UpdatedAt: r.UpdatedAt}
}

// ListStock returns every SKU's stock, sorted by SKU.
func ListStock(ctx context.Context, db sqlx.QueryerContext) ([]inventory.Stock, error) {
	const q = `SELECT sku, on_hand, reserved, updated_at FROM stock ORDER BY sku`
	var rows []stockRow
	if err := sqlx.SelectContext(ctx, db, &rows, q); err != nil {
		return nil, fmt.Errorf("list stock: %w", err)
	}
	out := make([]inventory.Stock, len(rows))
	for i, r := range rows {
		out[i] = r.domain()
	}
	return out, nil
}

// GetStock returns one SKU's stock, or inventory.ErrUnknownSKU.
func GetStock(ctx context.Context, db sqlx.QueryerContext, sku string) (inventory.Stock, error) {
	const q = `SELECT sku, on_hand, reserved, updated_at FROM stock WHERE sku = ?`
	var r stockRow
	if err := sqlx.GetContext(ctx, db, &r, q, sku); err != nil {
		return inventory.Stock{}, sqldb.NoRowsAs(err, inventory.ErrUnknownSKU, "get stock %s", sku)
	}
	return r.domain(), nil
}

// Hold reserves quantity of sku if that much is available. It reports
// false, changing nothing, when the SKU is short or unknown. The check and
// the change are one statement: two reservations racing for the last unit
// serialise on the row lock and the second finds the condition false.
func Hold(ctx context.Context, tx *sqlx.Tx, sku string, quantity int) (bool, error) {
	const q = `UPDATE stock SET reserved = reserved + ?, updated_at = NOW(6)
WHERE sku = ? AND on_hand - reserved >= ?`
	res, err := tx.ExecContext(ctx, q, quantity, sku, quantity)
	return sqldb.Changed(res, err, "hold %d of %s", quantity, sku)
}

// Available returns on_hand - reserved for sku as this transaction now sees
// it, and whether the SKU exists. Only the rejection path uses it, to word
// the reason: the decision itself was Hold's.
func Available(ctx context.Context, tx *sqlx.Tx, sku string) (int64, bool, error) {
	const q = `SELECT CAST(on_hand AS SIGNED) - CAST(reserved AS SIGNED) FROM stock WHERE sku = ?`
	var n int64
	if err := tx.GetContext(ctx, &n, q, sku); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("available %s: %w", sku, err)
	}
	return n, true, nil
}

// Commit turns quantity of held sku into a sale: it leaves on_hand and
// reserved. False means the stock row no longer covers the reservation.
func Commit(ctx context.Context, tx *sqlx.Tx, sku string, quantity int) (bool, error) {
	const q = `UPDATE stock SET on_hand = on_hand - ?, reserved = reserved - ?, updated_at = NOW(6)
WHERE sku = ? AND reserved >= ? AND on_hand >= ?`
	res, err := tx.ExecContext(ctx, q, quantity, quantity, sku, quantity, quantity)
	return sqldb.Changed(res, err, "commit %d of %s", quantity, sku)
}

// Release makes quantity of held sku available again. False means the stock
// row no longer covers the reservation.
func Release(ctx context.Context, tx *sqlx.Tx, sku string, quantity int) (bool, error) {
	const q = `UPDATE stock SET reserved = reserved - ?, updated_at = NOW(6)
WHERE sku = ? AND reserved >= ?`
	res, err := tx.ExecContext(ctx, q, quantity, sku, quantity)
	return sqldb.Changed(res, err, "release %d of %s", quantity, sku)
}

// Take sells quantity of sku that is not held: it leaves on_hand only while
// the unheld stock covers it, so it never takes what other reservations
// hold. A late confirm uses it for a reservation whose lease ran out. False
// means the SKU is short or unknown, changing nothing.
func Take(ctx context.Context, tx *sqlx.Tx, sku string, quantity int) (bool, error) {
	const q = `UPDATE stock SET on_hand = on_hand - ?, updated_at = NOW(6)
WHERE sku = ? AND on_hand - reserved >= ?`
	res, err := tx.ExecContext(ctx, q, quantity, sku, quantity)
	return sqldb.Changed(res, err, "take %d of %s", quantity, sku)
}

// StockChange is the sum of several stock changes of one SKU, split into
// what adds and what takes away (the columns are unsigned).
type StockChange struct {
	OnHandIn, OnHandOut     int // restocks; sales (commits)
	ReservedIn, ReservedOut int // holds; commits and releases
}

// Change applies c to sku in one statement: Hold, Commit, Release and
// Restock summed over the events of one consumer batch (inventoryapp's
// stockBatch). Its WHERE is theirs, summed: the holds fit in what was
// available before the batch (a release in the same batch does not count
// for them), and the row stays valid (on hand and reserved not below zero,
// reserved not above on hand). False means the changes cannot all apply,
// changing nothing; one at a time, the events find out which.
func Change(ctx context.Context, tx *sqlx.Tx, sku string, c StockChange) (bool, error) {
	const q = `UPDATE stock SET on_hand = on_hand + ? - ?, reserved = reserved + ? - ?, updated_at = NOW(6)
WHERE sku = ?
  AND on_hand >= reserved + ?
  AND on_hand + ? >= ? AND reserved + ? >= ?
  AND on_hand + ? + ? >= reserved + ? + ?`
	res, err := tx.ExecContext(ctx, q, c.OnHandIn, c.OnHandOut, c.ReservedIn, c.ReservedOut,
		sku,
		c.ReservedIn,
		c.OnHandIn, c.OnHandOut, c.ReservedIn, c.ReservedOut,
		c.OnHandIn, c.ReservedOut, c.ReservedIn, c.OnHandOut)
	return sqldb.Changed(res, err, "change stock of %s by %+v", sku, c)
}

// Restock puts quantity of sold sku back on hand (a cancel after the sale).
// False means the SKU is gone.
func Restock(ctx context.Context, tx *sqlx.Tx, sku string, quantity int) (bool, error) {
	const q = `UPDATE stock SET on_hand = on_hand + ?, updated_at = NOW(6) WHERE sku = ?`
	res, err := tx.ExecContext(ctx, q, quantity, sku)
	return sqldb.Changed(res, err, "restock %d of %s", quantity, sku)
}

// Receive adds a goods receipt to on_hand unless that would pass
// inventory.MaxOnHand. False means the SKU is unknown or the ceiling would
// be passed; the caller tells the two apart.
func Receive(ctx context.Context, tx *sqlx.Tx, sku string, quantity int) (bool, error) {
	const q = `UPDATE stock SET on_hand = on_hand + ?, updated_at = NOW(6)
WHERE sku = ? AND on_hand <= ?`
	res, err := tx.ExecContext(ctx, q, quantity, sku, inventory.MaxOnHand-int64(quantity))
	return sqldb.Changed(res, err, "receive %d of %s", quantity, sku)
}

// Savepoint marks a point in tx that RollbackTo can return to: the undo of
// an all-or-none step that must not undo the inbox claim before it.
func Savepoint(ctx context.Context, tx *sqlx.Tx, name string) error {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT "+sqldb.QuoteIdent(name)); err != nil {
		return fmt.Errorf("savepoint %s: %w", name, err)
	}
	return nil
}

// RollbackTo undoes everything tx did since the savepoint, which stays
// set.
func RollbackTo(ctx context.Context, tx *sqlx.Tx, name string) error {
	if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+sqldb.QuoteIdent(name)); err != nil {
		return fmt.Errorf("rollback to savepoint %s: %w", name, err)
	}
	return nil
}

// --- reservations ---

type reservationRow struct {
	OrderID   uint64       `db:"order_id"`
	Status    string       `db:"status"`
	Reason    string       `db:"reason"`
	Version   uint64       `db:"aggregate_version"`
	ExpiresAt sql.NullTime `db:"expires_at"`
	ExpiredAt sql.NullTime `db:"expired_at"`
	CreatedAt time.Time    `db:"created_at"`
	UpdatedAt time.Time    `db:"updated_at"`
}

const reservationColumns = `order_id, status, reason, aggregate_version, expires_at, expired_at, created_at, updated_at`

func (r reservationRow) domain() inventory.Reservation {
	return inventory.Reservation{OrderID: r.OrderID, Status: inventory.Status(r.Status), Reason: r.Reason,
		Version: r.Version, ExpiresAt: r.ExpiresAt.Time, ExpiredAt: r.ExpiredAt.Time,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// InsertReservation inserts an order's reservation. A positive lease sets
// expires_at to the database's NOW(6) plus the lease (a reservation that
// holds stock); zero leaves it NULL (a rejection, a marker). A reservation
// that already exists returns ErrReservationExists: a second insert for the
// same order waits for the first to commit or roll back, then fails or
// proceeds.
func InsertReservation(ctx context.Context, tx *sqlx.Tx, r inventory.Reservation, lease time.Duration) error {
	const q = `INSERT INTO reservations (order_id, status, reason, aggregate_version, expires_at)
VALUES (?, ?, ?, ?, DATE_ADD(NOW(6), INTERVAL ? MICROSECOND))`
	var micros any // nil: a NULL interval makes expires_at NULL
	if lease > 0 {
		micros = lease.Microseconds()
	}
	_, err := tx.ExecContext(ctx, q, r.OrderID, r.Status, inventory.ClipReason(r.Reason), r.Version, micros)
	if sqldb.IsDuplicateKey(err) {
		return ErrReservationExists
	}
	if err != nil {
		return fmt.Errorf("insert reservation %d: %w", r.OrderID, err)
	}
	return nil
}

// InsertItems inserts what a reservation holds.
func InsertItems(ctx context.Context, tx *sqlx.Tx, orderID uint64, lines []inventory.Line) error {
	const q = `INSERT INTO reservation_items (order_id, sku, quantity) VALUES `
	args := make([]any, 0, 3*len(lines))
	for _, l := range lines {
		args = append(args, orderID, l.SKU, l.Quantity)
	}
	if _, err := tx.ExecContext(ctx, q+sqldb.Values("(?, ?, ?)", len(lines)), args...); err != nil {
		return fmt.Errorf("insert reservation items %d: %w", orderID, err)
	}
	return nil
}

// GetReservation returns an order's reservation with its items, or
// inventory.ErrNoReservation.
func GetReservation(ctx context.Context, db sqlx.QueryerContext, orderID uint64) (inventory.Reservation, error) {
	const q = `SELECT ` + reservationColumns + ` FROM reservations WHERE order_id = ?`
	return withItems(ctx, db, q, orderID, "get")
}

// LockReservation reads an order's reservation with its items and locks its
// row until the transaction ends, so the decision made from it cannot race
// another event for the same order. The reservation row is always locked
// before any stock row, and stock rows in SKU order: one lock order for
// every use case.
func LockReservation(ctx context.Context, tx *sqlx.Tx, orderID uint64) (inventory.Reservation, error) {
	const q = `SELECT ` + reservationColumns + ` FROM reservations WHERE order_id = ? FOR UPDATE`
	return withItems(ctx, tx, q, orderID, "lock")
}

// withItems reads the reservation q finds for an order, with its items;
// verb (get, lock) names the read in an error.
func withItems(ctx context.Context, db sqlx.QueryerContext, q string, orderID uint64, verb string) (inventory.Reservation, error) {
	var r reservationRow
	if err := sqlx.GetContext(ctx, db, &r, q, orderID); err != nil {
		return inventory.Reservation{}, sqldb.NoRowsAs(err, inventory.ErrNoReservation, "%s reservation %d", verb, orderID)
	}
	res := r.domain()
	items, err := Items(ctx, db, orderID)
	res.Items = items
	return res, err
}

// LockReservations is LockReservation for the reservations of several
// orders in two statements, rows locked in order id order: the
// reservations of a consumer batch. Orders without one are absent.
func LockReservations(ctx context.Context, tx *sqlx.Tx, orderIDs []uint64) (map[uint64]inventory.Reservation, error) {
	const q = `SELECT ` + reservationColumns + ` FROM reservations WHERE order_id IN (?) ORDER BY order_id FOR UPDATE`
	out, err := sqldb.SelectInMap(ctx, tx, func(r reservationRow) (uint64, inventory.Reservation) {
		res := r.domain()
		res.Items = []inventory.Line{}
		return res.OrderID, res
	}, q, orderIDs)
	if err != nil {
		return nil, fmt.Errorf("lock %d reservations: %w", len(orderIDs), err)
	}
	if len(out) == 0 {
		return out, nil
	}
	found := slices.Sorted(maps.Keys(out)) // in order id order, as the rows came
	const qItems = `SELECT order_id, sku, quantity FROM reservation_items WHERE order_id IN (?) ORDER BY order_id, sku`
	var items []struct {
		OrderID  uint64 `db:"order_id"`
		SKU      string `db:"sku"`
		Quantity int    `db:"quantity"`
	}
	if err := sqldb.SelectIn(ctx, tx, &items, qItems, found); err != nil {
		return nil, fmt.Errorf("items of %d reservations: %w", len(found), err)
	}
	for _, it := range items {
		res := out[it.OrderID]
		res.Items = append(res.Items, inventory.Line{SKU: it.SKU, Quantity: it.Quantity})
		out[it.OrderID] = res
	}
	return out, nil
}

// Items returns what a reservation holds, sorted by SKU (the lock order).
func Items(ctx context.Context, db sqlx.QueryerContext, orderID uint64) ([]inventory.Line, error) {
	const q = `SELECT sku, quantity FROM reservation_items WHERE order_id = ? ORDER BY sku`
	var rows []struct {
		SKU      string `db:"sku"`
		Quantity int    `db:"quantity"`
	}
	if err := sqlx.SelectContext(ctx, db, &rows, q, orderID); err != nil {
		return nil, fmt.Errorf("reservation items %d: %w", orderID, err)
	}
	out := make([]inventory.Line, len(rows))
	for i, r := range rows {
		out[i] = inventory.Line{SKU: r.SKU, Quantity: r.Quantity}
	}
	return out, nil
}

// Transition moves a reservation from one status to another and stores
// version as its aggregate_version (the caller's current version for a move
// that emits no event, the next one for a move that does).
// Compare-and-set: the WHERE restates the status the decision was made on;
// zero rows changed means the reservation moved meanwhile, returned as
// false, not as success.
func Transition(ctx context.Context, tx *sqlx.Tx, orderID uint64, from, to inventory.Status, reason string, version uint64) (bool, error) {
	const q = `UPDATE reservations SET status = ?, reason = ?, aggregate_version = ?, updated_at = NOW(6)
WHERE order_id = ? AND status = ?`
	res, err := tx.ExecContext(ctx, q, to, inventory.ClipReason(reason), version, orderID, from)
	return sqldb.Changed(res, err, "reservation %d %s -> %s", orderID, from, to)
}

// --- leases ---

// LeaseExpired returns up to limit orders whose reservation is still
// reserved with its lease run out (database time), oldest lease first. A
// plain read: it only proposes candidates; Expire decides, row by row.
func LeaseExpired(ctx context.Context, db sqlx.QueryerContext, limit int) ([]uint64, error) {
	const q = `SELECT order_id FROM reservations
WHERE status = ? AND expires_at < NOW(6)
ORDER BY expires_at, order_id LIMIT ?`
	var ids []uint64
	if err := sqlx.SelectContext(ctx, db, &ids, q, inventory.Reserved, limit); err != nil {
		return nil, fmt.Errorf("expired leases: %w", err)
	}
	return ids, nil
}

// Expire moves a reserved reservation whose lease has run out to to
// (inventory.Expired), stamps expired_at and bumps aggregate_version for
// the event it will emit. Compare-and-set on status and lease, both
// re-checked under the row lock: if a confirm, a cancel or another sweeper
// got there first, or the lease is not over, nothing changes and it
// returns false. Two sweepers racing over the same row therefore release
// its stock once.
func Expire(ctx context.Context, tx *sqlx.Tx, orderID uint64, to inventory.Status, reason string) (bool, error) {
	const q = `UPDATE reservations
SET status = ?, reason = ?, expired_at = NOW(6), aggregate_version = aggregate_version + 1, updated_at = NOW(6)
WHERE order_id = ? AND status = ? AND expires_at < NOW(6)`
	res, err := tx.ExecContext(ctx, q, to, inventory.ClipReason(reason), orderID, inventory.Reserved)
	return sqldb.Changed(res, err, "expire reservation %d", orderID)
}

// Note replaces the reason of a reservation still in status, without moving
// it: how a stale event is recorded on the row it could not change.
func Note(ctx context.Context, tx *sqlx.Tx, orderID uint64, status inventory.Status, reason string) (bool, error) {
	const q = `UPDATE reservations SET reason = ?, updated_at = NOW(6) WHERE order_id = ? AND status = ?`
	res, err := tx.ExecContext(ctx, q, inventory.ClipReason(reason), orderID, status)
	return sqldb.Changed(res, err, "note on reservation %d", orderID)
}

// DeleteMarker deletes the marker a cancel left for an order it had not
// seen. Only the wrong-way switch ignore-order uses it.
func DeleteMarker(ctx context.Context, tx *sqlx.Tx, orderID uint64) error {
	const q = `DELETE FROM reservations WHERE order_id = ? AND status = ?`
	if _, err := tx.ExecContext(ctx, q, orderID, inventory.CancelledBeforeReserve); err != nil {
		return fmt.Errorf("delete marker %d: %w", orderID, err)
	}
	return nil
}
