package sqldb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/retry"
)

// ErrLeaseHeld: another session holds the job's lease (another instance,
// or another run in this one, is doing the job now).
var ErrLeaseHeld = errors.New("lease held by another session")

// ErrLeaseLost: the run's lease is gone. Its session ended (killed, the
// connection dropped) and the server freed the lock, so another run may
// hold it now: the run must stop before its next change.
var ErrLeaseLost = errors.New("lease lost")

// Lease is a job's database lease: the named user lock "<schema>.<job>"
// (GET_LOCK), held by a connection taken from the pool for the job's run
// and released after it. Instances of a service share its schema, so one
// instance at a time holds it; a run that cannot take it skips (or waits,
// see TryLease) instead of doing the job a second time.
//
// The server frees the lock when the holding session ends, so a crashed
// instance never leaves it held. The flip side: if the holder's connection
// drops mid-run, another run may start while the first is still going. So
// a run asks Check before each change it makes and stops on ErrLeaseLost.
// A change already past its check may still meet the second run's: each
// job's writes are compare-and-set and its audit rows keyed, so that
// window costs a rolled-back repair, not a duplicate. GET_LOCK is local to
// one server (docs/scaling.md: one primary per schema).
type Lease struct {
	conn *sqlx.Conn
	job  string
	name string
}

// qLeaseName is "<schema>.<job>", hashed when it would pass MySQL's 64
// character limit on lock names.
const qLeaseName = `IF(CHAR_LENGTH(CONCAT(DATABASE(), '.', ?)) <= 64, CONCAT(DATABASE(), '.', ?), SHA1(CONCAT(DATABASE(), '.', ?)))`

// leasePoll spaces the tries of a TryLease that waits.
var leasePoll = retry.Backoff{Base: 50 * time.Millisecond, Cap: time.Second}

// TryLease takes job's lease, waiting up to wait for a holder to release
// it (0: not at all). ErrLeaseHeld when it is still held after wait.
//
// A waiter holds no pool connection while it waits: each try is a
// GET_LOCK that does not wait, on a connection given back when the lock is
// held, and the tries are spaced by leasePoll. A GET_LOCK that waited on
// the server would pin one connection per waiter, and a burst of waiting
// operators would take the whole pool from the service.
func TryLease(ctx context.Context, db *sqlx.DB, job string, wait time.Duration) (*Lease, error) {
	deadline := time.Now().Add(wait)
	for attempt := 1; ; attempt++ {
		l, err := takeLease(ctx, db, job)
		if !errors.Is(err, ErrLeaseHeld) {
			return l, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, err
		}
		if !retry.Wait(ctx, min(left, leasePoll.Delay(attempt))) {
			return nil, fmt.Errorf("lease %s: %w", job, ctx.Err())
		}
	}
}

// takeLease is one try: GET_LOCK without waiting.
func takeLease(ctx context.Context, db *sqlx.DB, job string) (*Lease, error) {
	const q = `SELECT GET_LOCK(` + qLeaseName + `, 0), ` + qLeaseName
	conn, err := db.Connx(ctx)
	if err != nil {
		return nil, fmt.Errorf("lease %s: %w", job, err)
	}
	var got sql.NullInt64
	var name sql.NullString
	if err := conn.QueryRowxContext(ctx, q, job, job, job, job, job, job).Scan(&got, &name); err != nil {
		conn.Close()
		return nil, fmt.Errorf("lease %s: %w", job, err)
	}
	if err := lockAnswer(job, name.String, got); err != nil {
		conn.Close()
		return nil, err
	}
	return &Lease{conn: conn, job: job, name: name.String}, nil
}

// lockAnswer reads GET_LOCK's answer: 1 taken, 0 held by another session,
// NULL an error (no schema selected, so no lock name; the session killed
// while it waited; the server out of memory). NULL is not "held": reading
// it so would make the job skip quietly, every run, for good.
func lockAnswer(job, name string, got sql.NullInt64) error {
	switch {
	case !got.Valid:
		return fmt.Errorf("lease %s: GET_LOCK(%q) answered NULL: the server could not take the lock", job, name)
	case got.Int64 == 1:
		return nil
	default:
		return fmt.Errorf("lease %s: %w", job, ErrLeaseHeld)
	}
}

// Check reports whether this session still holds the lease: nil if so,
// ErrLeaseLost if the lock is no longer its own or its connection does not
// answer (a killed or dropped session has lost the lock with it). One
// round trip on the lease's own connection; a job calls it before each
// change. An ended ctx is reported as itself, not as a lost lease.
func (l *Lease) Check(ctx context.Context) error {
	const q = `SELECT IS_USED_LOCK(?) = CONNECTION_ID()`
	var mine sql.NullBool
	err := l.conn.QueryRowxContext(ctx, q, l.name).Scan(&mine)
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("lease %s: %w", l.job, ctx.Err())
	case err != nil:
		return fmt.Errorf("lease %s: %w: its session does not answer: %w", l.job, ErrLeaseLost, err)
	case !mine.Valid || !mine.Bool:
		return fmt.Errorf("lease %s: %w: the lock is no longer this session's", l.job, ErrLeaseLost)
	}
	return nil
}

// Release gives the lease back and returns the connection to the pool.
// It runs even when the job's context has ended.
func (l *Lease) Release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A failed release discards the connection: ending the session frees
	// the lock anyway.
	if _, err := l.conn.ExecContext(ctx, `DO RELEASE_LOCK(?)`, l.name); err != nil {
		_ = l.conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	l.conn.Close()
}
