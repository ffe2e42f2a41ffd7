package sqldb_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/retry"

	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
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
	wantSeedStock(t, db) // rolled back
}

// wantSeedStock checks that SKU-1 still has its seed stock, 100: the
// change the test made did not commit.
func wantSeedStock(t *testing.T, db *sqldbtest.DB) {
	t.Helper()
	var onHand int
	if err := db.Get(&onHand, "SELECT on_hand FROM stock WHERE sku = 'SKU-1'"); err != nil {
		t.Fatal(err)
	}
	if onHand != 100 {
		t.Fatalf("on_hand = %d, want 100 (the seed value)", onHand)
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
		return db.KillSession(ctx, tx)
	})
	if err == nil {
		t.Fatal("WithTx returned nil although the commit ran on a killed connection")
	}
	wantSeedStock(t, db) // the server rolled it back
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

func onHand(t *testing.T, db *sqldbtest.DB, sku string) int {
	t.Helper()
	var n int
	if err := db.Get(&n, "SELECT on_hand FROM stock WHERE sku = ?", sku); err != nil {
		t.Fatal(err)
	}
	return n
}

var fastRetry = retry.Backoff{Base: time.Millisecond, Cap: 5 * time.Millisecond}

// The session is killed in the middle of the transaction: the next
// statement fails on the broken connection, before COMMIT, so nothing was
// committed and the whole transaction runs again on a new connection. The
// change is made once. db-kill in the chaos run KILLs every session of a
// service while they work: a use case may meet more dead connections in a
// row than it has attempts (a cancel answered 500 that way), so the session
// also dies five times running and the sixth attempt, on a live one, makes
// the change once.
func TestWithTxRetryRunsAgainAfterKilledSessions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		kills int // attempts whose session is killed
	}{
		{"one killed session", 1},
		{"more dead connections than attempts", 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := sqldbtest.New(t, "inventory")
			ctx := context.Background()
			attempts := 0
			err := sqldb.WithTxRetry(ctx, db.DB, sqldb.TxRetry{Backoff: fastRetry}, func(tx *sqlx.Tx) error {
				attempts++
				if _, err := tx.ExecContext(ctx, "UPDATE stock SET on_hand = on_hand - 1 WHERE sku = 'SKU-1'"); err != nil {
					return err
				}
				if attempts <= c.kills {
					if err := db.KillSession(ctx, tx); err != nil {
						return err
					}
				}
				_, err := tx.ExecContext(ctx, "UPDATE stock SET on_hand = on_hand - 1 WHERE sku = 'SKU-2'")
				return err
			})
			if err != nil || attempts != c.kills+1 {
				t.Fatalf("WithTxRetry = %v after %d attempts, want success on attempt %d", err, attempts, c.kills+1)
			}
			if a, b := onHand(t, db, "SKU-1"), onHand(t, db, "SKU-2"); a != 99 || b != 499 {
				t.Fatalf("on_hand = %d and %d, want 99 and 499 (each change once)", a, b)
			}
		})
	}
}

// Two transactions lock two rows in opposite orders: InnoDB picks one as
// the deadlock victim (1213) and rolls it back; it runs again and both
// changes land.
func TestWithTxRetryRunsTheDeadlockVictimAgain(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "inventory")
	ctx := context.Background()
	var (
		wg         sync.WaitGroup
		bothLocked sync.WaitGroup
		attempts   atomic.Int32
		errs       [2]error
	)
	bothLocked.Add(2)
	for i, order := range [2][2]string{{"SKU-1", "SKU-2"}, {"SKU-2", "SKU-1"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			errs[i] = sqldb.WithTxRetry(ctx, db.DB, sqldb.TxRetry{Backoff: fastRetry}, func(tx *sqlx.Tx) error {
				attempts.Add(1)
				if _, err := tx.ExecContext(ctx, "UPDATE stock SET on_hand = on_hand + 1 WHERE sku = ?", order[0]); err != nil {
					return err
				}
				if first {
					first = false
					bothLocked.Done()
					bothLocked.Wait() // each holds its first row: the second lock closes the cycle
				}
				_, err := tx.ExecContext(ctx, "UPDATE stock SET on_hand = on_hand + 1 WHERE sku = ?", order[1])
				return err
			})
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("errors %v, want both transactions to commit", errs)
	}
	if n := attempts.Load(); n != 3 {
		t.Fatalf("%d attempts, want 3 (the victim ran twice)", n)
	}
	if a, b := onHand(t, db, "SKU-1"), onHand(t, db, "SKU-2"); a != 102 || b != 502 {
		t.Fatalf("on_hand = %d and %d, want 102 and 502", a, b)
	}
}

// A COMMIT sent on a connection that then breaks has an unknown outcome:
// the transaction may be committed. It is run again only for a use case
// that says it is idempotent; otherwise the caller gets ErrCommitUnknown.
func TestWithTxRetryRunsAnUnknownCommitAgainOnlyWhenIdempotent(t *testing.T) {
	t.Parallel()
	for _, idempotent := range []bool{false, true} {
		db := sqldbtest.New(t, "inventory")
		ctx := context.Background()
		attempts := 0
		err := sqldb.WithTxRetry(ctx, db.DB, sqldb.TxRetry{Backoff: fastRetry, Idempotent: idempotent}, func(tx *sqlx.Tx) error {
			attempts++
			if _, err := tx.ExecContext(ctx, "UPDATE stock SET on_hand = 7 WHERE sku = 'SKU-1'"); err != nil {
				return err
			}
			if attempts == 1 {
				return db.KillSession(ctx, tx) // the COMMIT goes out on a dead connection
			}
			return nil
		})
		switch {
		case !idempotent && (!errors.Is(err, sqldb.ErrCommitUnknown) || attempts != 1):
			t.Fatalf("not idempotent: %v after %d attempts, want ErrCommitUnknown after 1", err, attempts)
		case idempotent && (err != nil || attempts != 2 || onHand(t, db, "SKU-1") != 7):
			t.Fatalf("idempotent: %v after %d attempts, want success on the second", err, attempts)
		}
	}
}

// The retries are bounded, and only transient errors are retried.
func TestWithTxRetryIsBoundedAndRetriesOnlyTransientErrors(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "inventory")
	ctx := context.Background()
	attempts := 0
	err := sqldb.WithTxRetry(ctx, db.DB, sqldb.TxRetry{Attempts: 4, Backoff: fastRetry}, func(tx *sqlx.Tx) error {
		attempts++
		return fmt.Errorf("waited: %w", &mysql.MySQLError{Number: sqldb.ErLockWaitTimeout})
	})
	if sqldb.MySQLErrorNumber(err) != sqldb.ErLockWaitTimeout || attempts != 4 {
		t.Fatalf("always transient: %v after %d attempts, want the error after 4", err, attempts)
	}
	attempts = 0
	err = sqldb.WithTxRetry(ctx, db.DB, sqldb.TxRetry{Attempts: 4, Backoff: fastRetry, DeadConns: 5}, func(tx *sqlx.Tx) error {
		attempts++
		return fmt.Errorf("lost: %w", mysql.ErrInvalidConn)
	})
	if !errors.Is(err, mysql.ErrInvalidConn) || attempts != 4+5 {
		t.Fatalf("always a dead connection: %v after %d attempts, want the error after 4 + 5", err, attempts)
	}
	attempts = 0
	boom := errors.New("business rule")
	err = sqldb.WithTxRetry(ctx, db.DB, sqldb.TxRetry{Backoff: fastRetry}, func(tx *sqlx.Tx) error {
		attempts++
		return boom
	})
	if !errors.Is(err, boom) || attempts != 1 {
		t.Fatalf("permanent: %v after %d attempts, want it after 1", err, attempts)
	}
}

// A read outside a transaction whose session is killed while the statement
// runs fails with a broken connection (the driver cannot send it again: it
// does not know what the server did); ReadRetry reads again on another
// connection. Without it, a killed session turned a create's catalogue
// look-up into a 500 in the chaos run.
func TestReadRetryReadsAgainAfterAKilledSession(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "inventory")
	ctx := context.Background()
	marker := fmt.Sprintf("readretry-%d", time.Now().UnixNano())
	killed := make(chan error, 1)
	go func() { killed <- killStatement(ctx, db, marker) }()
	var errs []error
	var skus int
	err := sqldb.ReadRetry(ctx, sqldb.TxRetry{Backoff: fastRetry}, func() error {
		if len(errs) == 0 { // the first attempt: a long statement, killed while it runs
			var slept int
			err := db.GetContext(ctx, &slept, "SELECT /* "+marker+" */ SLEEP(10)")
			errs = append(errs, err)
			if err == nil {
				return errors.New("the statement was not killed")
			}
			return err
		}
		errs = append(errs, nil)
		return db.GetContext(ctx, &skus, "SELECT COUNT(*) FROM stock")
	})
	if kerr := <-killed; kerr != nil {
		t.Fatal(kerr)
	}
	if err != nil || len(errs) != 2 {
		t.Fatalf("ReadRetry = %v after %d attempts (%v), want success on the second", err, len(errs), errs)
	}
	if !sqldb.IsTransient(errs[0]) {
		t.Fatalf("the killed read failed with %v, which is not a transient error", errs[0])
	}
	if skus == 0 {
		t.Fatal("the second attempt read no stock rows")
	}
}

// killStatement waits until a statement containing marker runs and kills
// its session.
func killStatement(ctx context.Context, db *sqldbtest.DB, marker string) error {
	const q = `SELECT id FROM information_schema.processlist WHERE info LIKE ? AND info NOT LIKE '%processlist%'`
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var ids []int64
		if err := db.SelectContext(ctx, &ids, q, "%"+marker+"%"); err != nil {
			return err
		}
		if len(ids) > 0 {
			_, err := db.ExecContext(ctx, "KILL CONNECTION ?", ids[0])
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return errors.New("the statement to kill never ran")
}

// ReadRetry gives up after its attempts and does not retry a business or
// syntax error.
func TestReadRetryIsBoundedAndRetriesOnlyTransientErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	calls := 0
	err := sqldb.ReadRetry(ctx, sqldb.TxRetry{Attempts: 4, Backoff: fastRetry, DeadConns: 2}, func() error {
		calls++
		return mysql.ErrInvalidConn
	})
	if !errors.Is(err, mysql.ErrInvalidConn) || calls != 4+2 {
		t.Fatalf("a read that always breaks: %v after %d calls, want ErrInvalidConn after 4 + 2", err, calls)
	}
	calls = 0
	boom := errors.New("no such product")
	if err := sqldb.ReadRetry(ctx, sqldb.TxRetry{Backoff: fastRetry}, func() error { calls++; return boom }); !errors.Is(err, boom) || calls != 1 {
		t.Fatalf("a business error: %v after %d calls, want it once", err, calls)
	}
}

// Work registered with AfterCommit runs once the transaction committed, and
// not at all when it rolled back or its COMMIT failed.
func TestAfterCommitRunsOnlyAfterACommit(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "inventory")
	ctx := context.Background()
	var ran []string
	note := func(tx *sqlx.Tx, what string) { sqldb.AfterCommit(tx, func() { ran = append(ran, what) }) }
	if err := sqldb.WithTx(ctx, db.DB, func(tx *sqlx.Tx) error { note(tx, "committed"); return nil }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := sqldb.WithTx(ctx, db.DB, func(tx *sqlx.Tx) error { note(tx, "rolled back"); return boom }); !errors.Is(err, boom) {
		t.Fatalf("WithTx error = %v, want %v", err, boom)
	}
	err := sqldb.WithTx(ctx, db.DB, func(tx *sqlx.Tx) error {
		note(tx, "commit failed")
		return db.KillSession(ctx, tx)
	})
	if err == nil {
		t.Fatal("the COMMIT on a killed session succeeded")
	}
	if fmt.Sprint(ran) != "[committed]" {
		t.Fatalf("after-commit work that ran: %v, want only the committed transaction's", ran)
	}
}
