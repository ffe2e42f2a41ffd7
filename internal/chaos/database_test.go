package chaos

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
)

// The db-outage fault's lock on the real database: the service's own user
// is found by its sessions on its schema, locked (its session killed, a new
// connection refused: MariaDB's error 4151), and unlocked again; root,
// which the run itself uses, is refused. The self-test's wrong row is a
// compare-and-set on the inventory's reservations.
func TestLockAccountAndPlant(t *testing.T) {
	db := sqldbtest.New(t, "inventory")
	root, err := sql.Open("mysql", sqldbtest.ServerDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ctx := context.Background()
	user := "t_chaos_" + strings.ReplaceAll(db.Name[len(db.Name)-12:], "-", "")
	account := "'" + user + "'@'%'"
	for _, q := range []string{"CREATE USER " + account + " IDENTIFIED BY 'pw'", "GRANT ALL PRIVILEGES ON " + sqldb.QuoteIdent(db.Name) + ".* TO " + account} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { _, _ = root.Exec("DROP USER IF EXISTS " + account) })
	mc, err := mysql.ParseDSN(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	mc.User, mc.Passwd = user, "pw"
	svc, err := sql.Open("mysql", mc.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	conn, err := svc.Conn(ctx) // the service's session, on its schema
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	m := &MySQL{Root: root, Sessions: map[string]Session{"inventory": {Schema: db.Name}, "order": {User: "root"}}}
	detail, unlock, err := m.LockAccount(ctx, "inventory")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("locked: %s", detail)
	if !strings.Contains(detail, account) || !strings.Contains(detail, "1 sessions killed") {
		t.Errorf("detail %q, want %s locked and its one session killed", detail, account)
	}
	if err := conn.PingContext(ctx); err == nil {
		t.Error("the service's session still answers after the lock")
	}
	var me *mysql.MySQLError
	if _, err := svc.Conn(ctx); !errors.As(err, &me) || me.Number != 4151 {
		t.Errorf("a new connection of the locked account: %v, want error 4151 (account is locked)", err)
	}
	if err := unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := unlock(ctx); err != nil {
		t.Errorf("a second unlock: %v, want nothing", err)
	}
	if err := svc.PingContext(ctx); err != nil {
		t.Errorf("after the unlock: %v", err)
	}
	if _, _, err := m.LockAccount(ctx, "order"); err == nil || !strings.Contains(err.Error(), "root") {
		t.Errorf("locking root: %v, want a refusal", err)
	}

	if _, err := db.ExecContext(ctx, `INSERT INTO reservations (order_id, status, aggregate_version) VALUES (7, 'committed', 2)`); err != nil {
		t.Fatal(err)
	}
	if err := m.SetReservationStatus(ctx, "7", "committed", "released"); err != nil {
		t.Fatal(err)
	}
	if err := m.SetReservationStatus(ctx, "7", "committed", "released"); err == nil {
		t.Error("a second plant from committed: want an error (the row is released)")
	}
	var status string
	if err := db.GetContext(ctx, &status, `SELECT status FROM reservations WHERE order_id = 7`); err != nil || status != "released" {
		t.Errorf("status %q (%v), want released", status, err)
	}
}
