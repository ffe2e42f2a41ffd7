package chaos

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MySQL injects database faults through the server's root connection. It
// reads no service's tables: it finds a service's sessions in
// information_schema.PROCESSLIST and takes the server-wide read lock.
type MySQL struct {
	Root *sql.DB
	// Sessions says which sessions belong to each service: by database
	// user, or by schema (the services' DSNs name their schema).
	Sessions map[string]Session
}

// lockWait bounds how long FLUSH TABLES WITH READ LOCK may wait for running
// statements, in each of lockTries tries (on a shared server another
// program's long statement can hold it up for a while).
const (
	lockWait  = 2 * time.Second
	lockTries = 6
)

// Session identifies a service's database sessions; either field may be
// empty.
type Session struct{ User, Schema string }

// KillSessions implements Database: KILL CONNECTION for every session of
// the service but our own, as a network cut or a DBA would.
func (m *MySQL) KillSessions(ctx context.Context, service string) (int, error) {
	s, ok := m.Sessions[service]
	if !ok || (s.User == "" && s.Schema == "") {
		return 0, fmt.Errorf("no database user or schema known for %s", service)
	}
	const q = `SELECT ID FROM information_schema.PROCESSLIST
WHERE ID <> CONNECTION_ID() AND ((? <> '' AND USER = ?) OR (? <> '' AND DB = ?))`
	rows, err := m.Root.QueryContext(ctx, q, s.User, s.User, s.Schema, s.Schema)
	if err != nil {
		return 0, fmt.Errorf("list %s's sessions: %w", service, err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	killed := 0
	for _, id := range ids {
		// KILL takes no placeholder; id is an integer the server gave us.
		_, err := m.Root.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
		var me *mysql.MySQLError
		switch {
		case err == nil:
			killed++
		case errors.As(err, &me) && me.Number == 1094: // unknown thread: it ended meanwhile
		default:
			return killed, fmt.Errorf("kill session %d of %s: %w", id, service, err)
		}
	}
	return killed, nil
}

// GlobalReadLock implements Database: FLUSH TABLES WITH READ LOCK on one
// connection, held for hold, then UNLOCK TABLES. Every write on the server
// waits meanwhile, other databases' too, so the whole stall is kept short:
// while FLUSH waits for running statements to finish, new writes already
// wait behind it, so that wait is cut at lockWait and tried again a second
// later rather than left to grow. It returns how many tries it took. If
// the unlock fails, the connection is dropped, which releases the lock.
func (m *MySQL) GlobalReadLock(ctx context.Context, hold time.Duration) (tries int, err error) {
	conn, err := m.Root.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION lock_wait_timeout = %d", int(lockWait.Seconds()))); err != nil {
		return 0, err
	}
	for tries = 1; ; tries++ {
		_, err := conn.ExecContext(ctx, "FLUSH TABLES WITH READ LOCK")
		var me *mysql.MySQLError
		if err == nil {
			break
		}
		if !errors.As(err, &me) || me.Number != 1205 || tries == lockTries {
			return tries, fmt.Errorf("FLUSH TABLES WITH READ LOCK (try %d): %w", tries, err)
		}
		select { // a long statement is running: let the writers through, then try again
		case <-ctx.Done():
			return tries, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	select {
	case <-ctx.Done():
	case <-time.After(hold):
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := conn.ExecContext(uctx, "UNLOCK TABLES"); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // close it: the server releases the lock
		return tries, fmt.Errorf("UNLOCK TABLES (connection dropped instead): %w", err)
	}
	return tries, nil
}
