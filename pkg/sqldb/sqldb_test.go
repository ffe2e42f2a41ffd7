package sqldb_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/sqldb"
	"github.com/relmsg/ordersaga/pkg/sqldb/sqldbtest"
)

func TestWithTxRollsBackOnError(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "inventory")
	ctx := context.Background()
	boom := errors.New("boom")
	err := sqldb.WithTx(ctx, db.DB, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE stock SET on_hand = 999 WHERE sku = 'SKU-1'"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("WithTx error = %v, want %v", err, boom)
	}
	var onHand int
	if err := db.GetContext(ctx, &onHand, "SELECT on_hand FROM stock WHERE sku = 'SKU-1'"); err != nil {
		t.Fatal(err)
	}
	if onHand != 100 {
		t.Fatalf("on_hand after rollback = %d, want 100 (the seed value)", onHand)
	}
}

// A COMMIT that fails must come back as an error: the transaction's session
// is killed from another connection before fn returns, so the COMMIT runs on a
// dead connection and the server has rolled the change back.
func TestWithTxReportsCommitFailure(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "inventory")
	ctx := context.Background()
	err := sqldb.WithTx(ctx, db.DB, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE stock SET on_hand = 1 WHERE sku = 'SKU-1'"); err != nil {
			return err
		}
		// Kill our own connection's session from outside: the commit then
		// runs on a dead connection.
		var id int64
		if err := tx.GetContext(ctx, &id, "SELECT CONNECTION_ID()"); err != nil {
			return err
		}
		if _, err := db.ExecContext(ctx, "KILL ?", id); err != nil {
			return err
		}
		return nil
	})
	if err == nil {
		t.Fatal("WithTx returned nil although the commit ran on a killed connection")
	}
	var onHand int
	if err := db.GetContext(ctx, &onHand, "SELECT on_hand FROM stock WHERE sku = 'SKU-1'"); err != nil {
		t.Fatal(err)
	}
	if onHand != 100 {
		t.Fatalf("on_hand = %d after a failed commit, want 100", onHand)
	}
}

func TestSessionSettingsOnEveryConnection(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	ctx := context.Background()
	// Hold several connections at once so the check covers more than one.
	var conns []*sqlx.Conn
	for i := 0; i < 4; i++ {
		c, err := db.Connx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for i, c := range conns {
		var tz string
		var wait int
		if err := c.QueryRowxContext(ctx, "SELECT @@session.time_zone, @@session.innodb_lock_wait_timeout").Scan(&tz, &wait); err != nil {
			t.Fatal(err)
		}
		if tz != "+00:00" || wait != 5 {
			t.Errorf("conn %d: time_zone=%q lock_wait_timeout=%d, want +00:00 and 5", i, tz, wait)
		}
		c.Close()
	}
}

func TestStrictModeRejectsOverlongValues(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	ctx := context.Background()
	long := "0123456789012345678901234567890123456789" // 40 > CHAR(36)
	_, err := db.ExecContext(ctx, "INSERT INTO consumer_inbox (consumer_name, event_id) VALUES ('c', ?)", long)
	if sqldb.MySQLErrorNumber(err) != sqldb.ErDataTooLong {
		t.Fatalf("insert of a 40-character event id: err = %v, want error %d (data too long)", err, sqldb.ErDataTooLong)
	}
}
