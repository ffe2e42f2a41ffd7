package sqldbtest

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/migrations"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
)

// schema is what a service's migrations leave in an empty database: each
// table's CREATE TABLE as the server prints it, and the rows the
// migrations inserted (goose's version table, seed products and stock).
//
// Applying the migrations is most of a test database's cost: dozens of
// ALTER TABLEs, each a table rebuild the server syncs to disk. A test
// process migrates one scratch database per service for real, once, and
// every later test database is built from what that left: the same
// tables, the same rows, in a fraction of the statements.
// TestCopyIsTheMigratedSchema holds the two equal.
type schema struct {
	creates []string
	rows    []tableRows
}

type tableRows struct {
	table   string
	columns []string
	values  [][]any // as the driver reads them: nil for NULL
}

var schemas sync.Map // service -> func() (*schema, error), once per process

// schemaOf migrates a scratch database for the service once per process
// and returns what it holds.
func schemaOf(ctx context.Context, service string) (*schema, error) {
	once, _ := schemas.LoadOrStore(service, sync.OnceValues(func() (*schema, error) {
		return migrateAndRead(context.WithoutCancel(ctx), service)
	}))
	return once.(func() (*schema, error))()
}

func migrateAndRead(ctx context.Context, service string) (*schema, error) {
	db, name, err := createDatabase(ctx, service)
	if err != nil {
		return nil, err
	}
	defer func() {
		_, _ = db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+sqldb.QuoteIdent(name))
		db.Close()
	}()
	if err := migrate(ctx, db, service); err != nil {
		return nil, fmt.Errorf("migrate %s: %w", name, err)
	}
	return readSchema(ctx, db)
}

func migrate(ctx context.Context, db *sqlx.DB, service string) error {
	fsys, err := migrations.For(service)
	if err != nil {
		return err
	}
	return sqldb.Migrate(ctx, db, fsys, nil)
}

const listTables = `
SELECT TABLE_NAME FROM information_schema.TABLES
 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_TYPE = 'BASE TABLE'
 ORDER BY TABLE_NAME`

// readSchema reads the tables and rows of the database db is connected to.
func readSchema(ctx context.Context, db *sqlx.DB) (*schema, error) {
	var tables []string
	if err := db.SelectContext(ctx, &tables, listTables); err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	s := &schema{}
	for _, t := range tables {
		var name, create string
		if err := db.QueryRowContext(ctx, "SHOW CREATE TABLE "+sqldb.QuoteIdent(t)).Scan(&name, &create); err != nil {
			return nil, fmt.Errorf("show create table %s: %w", t, err)
		}
		s.creates = append(s.creates, create)
		r, err := readRows(ctx, db, t)
		if err != nil {
			return nil, err
		}
		if len(r.values) > 0 {
			s.rows = append(s.rows, r)
		}
	}
	return s, nil
}

func readRows(ctx context.Context, db *sqlx.DB, table string) (tableRows, error) {
	r := tableRows{table: table}
	rows, err := db.QueryContext(ctx, "SELECT * FROM "+sqldb.QuoteIdent(table))
	if err != nil {
		return r, fmt.Errorf("read %s: %w", table, err)
	}
	defer rows.Close()
	if r.columns, err = rows.Columns(); err != nil {
		return r, err
	}
	for rows.Next() {
		vals := make([]any, len(r.columns))
		dest := make([]any, len(vals))
		for i := range vals {
			dest[i] = &vals[i]
		}
		if err := rows.Scan(dest...); err != nil {
			return r, fmt.Errorf("read %s: %w", table, err)
		}
		r.values = append(r.values, vals)
	}
	return r, rows.Err()
}

// apply creates the schema's tables and rows in the (empty) database db is
// connected to. Foreign keys are checked off on its one connection, so the
// tables can be created in name order.
func (s *schema) apply(ctx context.Context, db *sqlx.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION foreign_key_checks = 0"); err != nil {
		return err
	}
	// The pool must not get the connection back with the checks off.
	defer conn.ExecContext(context.WithoutCancel(ctx), "SET SESSION foreign_key_checks = 1")
	for _, c := range s.creates {
		if _, err := conn.ExecContext(ctx, c); err != nil {
			return fmt.Errorf("create table: %w", err)
		}
	}
	for _, r := range s.rows {
		cols := make([]string, len(r.columns))
		for i, c := range r.columns {
			cols[i] = sqldb.QuoteIdent(c)
		}
		row := "(" + strings.TrimSuffix(strings.Repeat("?,", len(cols)), ",") + ")"
		var args []any
		for _, v := range r.values {
			args = append(args, v...)
		}
		q := "INSERT INTO " + sqldb.QuoteIdent(r.table) + " (" + strings.Join(cols, ",") + ") VALUES " +
			strings.TrimSuffix(strings.Repeat(row+",", len(r.values)), ",")
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("rows of %s: %w", r.table, err)
		}
	}
	return nil
}
