// Package sqldbtest gives each integration test its own freshly migrated
// database on the real MySQL/MariaDB server, dropped when the test ends, so
// tests run in parallel without seeing each other's rows.
package sqldbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/pressly/goose/v3"

	"github.com/relmsg/ordersaga/migrations"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
)

// ServerDSN is the server the tests use: TEST_MYSQL_DSN, or the local
// development server (root, empty password).
func ServerDSN() string {
	if dsn := os.Getenv("TEST_MYSQL_DSN"); dsn != "" {
		return dsn
	}
	return "root@tcp(127.0.0.1:3306)/"
}

// DB is one test database.
type DB struct {
	*sqlx.DB
	Name string // schema name, unique per test
	DSN  string // DSN a service under test can be given as MYSQL_DSN

	service string // whose schema it has
}

// New creates a database named after the service with that service's
// schema ("order", "inventory" or "payment": what its migrations make, see
// schema.go) and drops it at cleanup. A server that cannot be reached fails
// the test: it is never skipped.
func New(t testing.TB, service string) *DB {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs MariaDB/MySQL (run without -short)")
	}
	if _, err := mysql.ParseDSN(ServerDSN()); err != nil {
		t.Fatalf("TEST_MYSQL_DSN: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	s, err := schemaOf(ctx, service)
	if err != nil {
		t.Fatalf("MariaDB/MySQL at %s is required for this test (start it with scripts/test.sh or see README): %v", serverAddr(), err)
	}
	db := create(ctx, t, service)
	if err := s.apply(ctx, db.DB); err != nil {
		t.Fatalf("schema of %s in %s: %v", service, db.Name, err)
	}
	return db
}

// NewAt is a database of the service stopped after its migration version:
// as the service left it before the later migrations, for a test of one of
// them against rows written before it. MigrateRest applies the others.
func NewAt(t testing.TB, service string, version int64) *DB {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs MariaDB/MySQL (run without -short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := create(ctx, t, service)
	fsys, err := migrations.For(service)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectMySQL, db.DB.DB, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, version); err != nil {
		t.Fatalf("migrate %s up to %d: %v", db.Name, version, err)
	}
	return db
}

// MigrateRest applies every migration of the service not applied yet, as
// the service does when it starts.
func (db *DB) MigrateRest(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := migrate(ctx, db.DB, db.service); err != nil {
		t.Fatalf("migrate %s: %v", db.Name, err)
	}
}

// KillSession kills tx's own session from another connection of db, as a
// DBA's KILL or a failover would: the next statement or the COMMIT runs on
// a dead connection.
func (db *DB) KillSession(ctx context.Context, tx *sqlx.Tx) error {
	var id int64
	if err := tx.GetContext(ctx, &id, "SELECT CONNECTION_ID()"); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, "KILL CONNECTION ?", id)
	return err
}

// create creates an empty database for the service and drops it when the
// test ends.
func create(ctx context.Context, t testing.TB, service string) *DB {
	t.Helper()
	db, name, err := createDatabase(ctx, service)
	if err != nil {
		t.Fatalf("MariaDB/MySQL at %s is required for this test (start it with scripts/test.sh or see README): %v", serverAddr(), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+sqldb.QuoteIdent(name)); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
		db.Close()
	})
	return &DB{DB: db, Name: name, DSN: dsnFor(name), service: service}
}

// createDatabase creates an empty database t_<service>_<12 hex digits>
// (the name scripts/test.sh knows to clean up after a killed run).
func createDatabase(ctx context.Context, service string) (*sqlx.DB, string, error) {
	name := "t_" + service + "_" + randomHex(6)
	db, err := sqldb.Open(ctx, sqldb.Config{DSN: dsnFor(name), CreateDatabase: true, MaxOpenConns: 12})
	if err != nil {
		return nil, "", err
	}
	return db, name, nil
}

func dsnFor(database string) string {
	mc, err := mysql.ParseDSN(ServerDSN())
	if err != nil {
		panic(fmt.Sprintf("TEST_MYSQL_DSN: %v", err))
	}
	mc.DBName = database
	return mc.FormatDSN()
}

func serverAddr() string {
	if mc, err := mysql.ParseDSN(ServerDSN()); err == nil {
		return mc.Addr
	}
	return ServerDSN()
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return hex.EncodeToString(b)
}
