package sqldb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
)

// ErrLeaseHeld: another session holds the job's lease (another instance,
// or another run in this one, is doing the job now).
var ErrLeaseHeld = errors.New("lease held by another session")

// Lease is a job's database lease: the named user lock "<schema>.<job>"
// (GET_LOCK), held by a connection taken from the pool for the job's run
// and released after it. Instances of a service share its schema, so one
// instance at a time holds it; a run that cannot take it skips (or waits,
// see TryLease) instead of doing the job a second time.
//
// The server frees the lock when the holding session ends, so a crashed
// instance never leaves it held. The flip side: if the holder's connection
// drops mid-run, another instance may start while it finishes. A lease
// keeps duplicate work and duplicate audit rows out in the normal case;
// correctness still comes from each job's compare-and-set writes. GET_LOCK
// is local to one server (docs/scaling.md: one primary per schema).
type Lease struct {
	conn *sqlx.Conn
	name string
}

// qLeaseName is "<schema>.<job>", hashed when it would pass MySQL's 64
// character limit on lock names.
const qLeaseName = `IF(CHAR_LENGTH(CONCAT(DATABASE(), '.', ?)) <= 64, CONCAT(DATABASE(), '.', ?), SHA1(CONCAT(DATABASE(), '.', ?)))`

// TryLease takes job's lease, waiting up to wait for a holder to release
// it (0: not at all). ErrLeaseHeld when it is still held after wait.
func TryLease(ctx context.Context, db *sqlx.DB, job string, wait time.Duration) (*Lease, error) {
	conn, err := db.Connx(ctx)
	if err != nil {
		return nil, fmt.Errorf("lease %s: %w", job, err)
	}
	// 1: taken; 0: held by another session after the wait; NULL: error.
	var got sql.NullInt64
	var name string
	q := `SELECT GET_LOCK(` + qLeaseName + `, ?), ` + qLeaseName
	if err := conn.QueryRowxContext(ctx, q, job, job, job, wait.Seconds(), job, job, job).Scan(&got, &name); err != nil {
		conn.Close()
		return nil, fmt.Errorf("lease %s: %w", job, err)
	}
	if !got.Valid || got.Int64 != 1 {
		conn.Close()
		return nil, fmt.Errorf("lease %s: %w", job, ErrLeaseHeld)
	}
	return &Lease{conn: conn, name: name}, nil
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
