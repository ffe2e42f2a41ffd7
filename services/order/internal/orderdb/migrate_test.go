package orderdb_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/pressly/goose/v3"

	"github.com/relmsg/ordersaga/migrations"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
)

// Audit rows written before they were numbered get their order's numbers
// in the order they were written; after that a row whose number the order
// has already is refused as audited already, not written twice.
func TestAuditRowsOfBeforeTheKeyAreNumbered(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("integration test: needs MariaDB/MySQL (run without -short)")
	}
	ctx := context.Background()
	mc, err := mysql.ParseDSN(sqldbtest.ServerDSN())
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	mc.DBName = "t_migrate_" + hex.EncodeToString(b)
	db, err := sqldb.Open(ctx, sqldb.Config{DSN: mc.FormatDSN(), CreateDatabase: true, MaxOpenConns: 2})
	if err != nil {
		t.Fatalf("MariaDB/MySQL is required for this test: %v", err)
	}
	t.Cleanup(func() {
		db.MustExec("DROP DATABASE " + sqldb.QuoteIdent(mc.DBName))
		db.Close()
	})
	fsys, err := migrations.For("order")
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectMySQL, db.DB, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 160); err != nil { // reconciliation_audit as it was
		t.Fatal(err)
	}
	for i, r := range []struct {
		order   int
		secsAgo int
	}{{7, 30}, {8, 20}, {7, 10}, {7, 20}} {
		db.MustExec(`INSERT INTO reconciliation_audit (repair_id, run_id, order_id, classification, action, outcome, evidence, created_at)
VALUES (?, 'run', ?, 'result_missing', 'apply_result', 'repaired', '{}', TIMESTAMPADD(SECOND, -?, NOW(6)))`,
			fmt.Sprintf("r%d", i), r.order, r.secsAgo)
	}
	if err := sqldb.Migrate(ctx, db, fsys, nil); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := db.Select(&got, `SELECT CONCAT_WS('/', order_id, audit_seq, repair_id) FROM reconciliation_audit
ORDER BY order_id, audit_seq`); err != nil {
		t.Fatal(err)
	}
	if want := "[7/1/r0 7/2/r3 7/3/r2 8/1/r1]"; fmt.Sprint(got) != want {
		t.Errorf("audit rows after the migration = %v, want %s", got, want)
	}

	again := orderdb.Audit{RepairID: "r9", RunID: "run2", OrderID: 7, Seq: 3, Classification: "result_missing",
		Action: "apply_result", Outcome: "state_changed", Evidence: []byte(`{}`)}
	if err := orderdb.InsertAudit(ctx, db, again); !errors.Is(err, orderdb.ErrAuditExists) {
		t.Fatalf("a second row numbered 3 for order 7: %v, want ErrAuditExists", err)
	}
	again.Seq = 4
	if err := orderdb.InsertAudit(ctx, db, again); err != nil {
		t.Fatalf("the next row of order 7: %v", err)
	}
}
