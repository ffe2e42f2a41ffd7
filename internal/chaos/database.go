package chaos

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/relmsg/ordersaga/pkg/base/sqldb"
)

// MySQL injects database faults through the server's root connection. It
// reads no service's tables: it finds a service's sessions in
// information_schema.PROCESSLIST and takes the server-wide read lock.
type MySQL struct {
	Root *sql.DB
	// Sessions says which sessions belong to each service: by database
	// user, or by schema (the services' DSNs name their schema).
	Sessions map[string]Session
	// LockSchemas narrows db-lock to these schemas' tables: the stack's
	// writes wait as under the global lock, other databases on the server
	// (other programs, other tests) do not. Empty: the server-wide lock.
	LockSchemas []string
}

// lockWait bounds how long the read lock may wait for running statements,
// in each of lockTries tries: just above the services' own 5 s row-lock
// wait, because under load a statement waiting for a row lock, whose holder
// itself waits behind the flush, ends only when that wait times out.
const (
	lockWait  = 6 * time.Second
	lockTries = 3
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
	return m.kill(ctx, `((? <> '' AND USER = ?) OR (? <> '' AND DB = ?))`, s.User, s.User, s.Schema, s.Schema)
}

// kill kills every session but our own that where (a condition on
// information_schema.PROCESSLIST) selects; it returns how many.
func (m *MySQL) kill(ctx context.Context, where string, args ...any) (int, error) {
	q := `SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND ` + where
	ids, err := column[int64](ctx, m.Root, q, args...)
	if err != nil {
		return 0, fmt.Errorf("list the sessions: %w", err)
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
			return killed, fmt.Errorf("kill session %d: %w", id, err)
		}
	}
	return killed, nil
}

// ReadLock implements Database: a read lock on one connection, held for
// hold, then UNLOCK TABLES. Every write to the locked tables waits
// meanwhile. With LockSchemas it is FLUSH TABLES <every table of those
// schemas> WITH READ LOCK; without, FLUSH TABLES WITH READ LOCK, which
// stalls every database on the server. Before it holds, FLUSH waits for the
// statements running on those tables, and new writes already wait behind
// it: that wait is cut at lockWait and tried again a second later rather
// than left to grow. If the unlock fails, the connection is dropped, which
// releases the lock.
func (m *MySQL) ReadLock(ctx context.Context, hold time.Duration) (string, error) {
	stmt, scope := "FLUSH TABLES WITH READ LOCK", "global read lock"
	if len(m.LockSchemas) > 0 {
		tables, err := m.tablesOf(ctx, m.LockSchemas)
		if err != nil {
			return "", err
		}
		stmt = "FLUSH TABLES " + strings.Join(tables, ", ") + " WITH READ LOCK"
		scope = fmt.Sprintf("read lock on the %d tables of %s", len(tables), strings.Join(m.LockSchemas, ", "))
	}
	conn, err := m.Root.Conn(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION lock_wait_timeout = %d", int(lockWait.Seconds()))); err != nil {
		return "", err
	}
	tries := 1
	for ; ; tries++ {
		_, err := conn.ExecContext(ctx, stmt)
		var me *mysql.MySQLError
		if err == nil {
			break
		}
		if !errors.As(err, &me) || me.Number != 1205 || tries == lockTries {
			return "", fmt.Errorf("%s (try %d): %w", scope, tries, err)
		}
		select { // a statement is still running: let the writers through, then try again
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
	detail := fmt.Sprintf("%s held %s", scope, round(hold))
	if tries > 1 {
		detail += fmt.Sprintf(" (taken at try %d)", tries)
	}
	select {
	case <-ctx.Done():
	case <-time.After(hold):
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := conn.ExecContext(uctx, "UNLOCK TABLES"); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // close it: the server releases the lock
		return detail, fmt.Errorf("UNLOCK TABLES (connection dropped instead): %w", err)
	}
	return detail, nil
}

// tablesOf lists the base tables of the schemas (metadata only), quoted.
func (m *MySQL) tablesOf(ctx context.Context, schemas []string) ([]string, error) {
	q := `SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES
WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA IN (?` + strings.Repeat(", ?", len(schemas)-1) + `)
ORDER BY TABLE_SCHEMA, TABLE_NAME`
	args := make([]any, len(schemas))
	for i, s := range schemas {
		args[i] = s
	}
	rows, err := m.Root.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list the tables to lock: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var schema, table string
		if err := rows.Scan(&schema, &table); err != nil {
			return nil, err
		}
		out = append(out, sqldb.QuoteIdent(schema)+"."+sqldb.QuoteIdent(table))
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no tables in %s", strings.Join(schemas, ", "))
	}
	return out, nil
}

// LockAccount implements Database: the service's database account is
// locked (ALTER USER ... ACCOUNT LOCK, every host it has) and its sessions
// killed, so the service can neither go on nor connect again, as in an
// outage; unlock unlocks it. The account is the service's own user
// (Session.User, else the user of its sessions on its schema): root, which
// the run itself uses, is refused.
func (m *MySQL) LockAccount(ctx context.Context, service string) (string, func(context.Context) error, error) {
	user, err := m.userOf(ctx, service)
	if err != nil {
		return "", nil, err
	}
	hosts, err := column[string](ctx, m.Root, `SELECT Host FROM mysql.user WHERE User = ?`, user)
	if err != nil {
		return "", nil, fmt.Errorf("the hosts of %s: %w", user, err)
	}
	if len(hosts) == 0 {
		return "", nil, fmt.Errorf("no account of user %s found in mysql.user", user)
	}
	accounts := make([]string, len(hosts))
	for i, host := range hosts {
		accounts[i] = quoteString(user) + "@" + quoteString(host)
	}
	alter := func(ctx context.Context, what string) error {
		var errs []error
		for _, a := range accounts {
			if _, err := m.Root.ExecContext(ctx, "ALTER USER "+a+" ACCOUNT "+what); err != nil {
				errs = append(errs, fmt.Errorf("ALTER USER %s ACCOUNT %s: %w", a, what, err))
			}
		}
		return errors.Join(errs...)
	}
	unlock := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return alter(ctx, "UNLOCK")
	}
	if err := alter(ctx, "LOCK"); err != nil {
		return "", nil, errors.Join(err, unlock(context.WithoutCancel(ctx)))
	}
	n, err := m.kill(ctx, `USER = ?`, user)
	if err != nil {
		return "", nil, errors.Join(err, unlock(context.WithoutCancel(ctx)))
	}
	return fmt.Sprintf("account %s (%d sessions killed)", strings.Join(accounts, ", "), n), unlock, nil
}

// userOf is the database user of the service: Session.User, else the one
// its sessions on its schema use now, the run's own user (root) left out.
func (m *MySQL) userOf(ctx context.Context, service string) (string, error) {
	s := m.Sessions[service]
	user := s.User
	if user == "" && s.Schema != "" {
		const q = `SELECT DISTINCT USER FROM information_schema.PROCESSLIST
WHERE DB = ? AND ID <> CONNECTION_ID() AND USER <> SUBSTRING_INDEX(CURRENT_USER(), '@', 1)`
		users, err := column[string](ctx, m.Root, q, s.Schema)
		if err != nil {
			return "", fmt.Errorf("the sessions of %s: %w", service, err)
		}
		switch len(users) {
		case 0:
			return "", fmt.Errorf("%s has no session on %s but as root, which the run uses itself and cannot lock: db-outage needs the service's own database user (scripts/up.sh and docker compose give each service one; -db-users names it)", service, s.Schema)
		case 1:
			user = users[0]
		default:
			return "", fmt.Errorf("%s's sessions on %s use %d users (%v): name its own with -db-users", service, s.Schema, len(users), users)
		}
	}
	switch user {
	case "":
		return "", fmt.Errorf("no database user or schema known for %s", service)
	case "root":
		return "", fmt.Errorf("%s connects as root, which the run uses itself and cannot lock: db-outage needs the service's own database user (scripts/up.sh and docker compose give each service one)", service)
	}
	return user, nil
}

// quoteString is a MySQL string literal.
func quoteString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(s) + "'"
}

// SetReservationStatus implements Planter on the inventory's schema
// (Sessions["inventory"].Schema): the self-test's wrong row.
func (m *MySQL) SetReservationStatus(ctx context.Context, orderID, from, to string) error {
	schema := m.Sessions["inventory"].Schema
	if schema == "" {
		return errors.New("the inventory's schema is not known (-db-schemas)")
	}
	q := `UPDATE ` + sqldb.QuoteIdent(schema) + `.reservations SET status = ? WHERE order_id = ? AND status = ?`
	res, err := m.Root.ExecContext(ctx, q, to, orderID, from)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("reservation of order %s: %d rows from %s to %s (%v)", orderID, n, from, to, err)
	}
	return nil
}

// column returns the one column q selects, from every row.
func column[T any](ctx context.Context, db *sql.DB, q string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
