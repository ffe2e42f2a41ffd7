package orderdb_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
)

// Audit rows written before they were numbered get their order's numbers
// in the order they were written; after that a row whose number the order
// has already is refused as audited already, not written twice.
func TestAuditRowsOfBeforeTheKeyAreNumbered(t *testing.T) {
	t.Parallel()
	db := sqldbtest.NewAt(t, "order", 160) // reconciliation_audit as it was
	for i, r := range []struct {
		order   int
		secsAgo int
	}{{7, 30}, {8, 20}, {7, 10}, {7, 20}} {
		db.MustExec(`INSERT INTO reconciliation_audit (repair_id, run_id, order_id, classification, action, outcome, evidence, created_at)
VALUES (?, 'run', ?, 'result_missing', 'apply_result', 'repaired', '{}', TIMESTAMPADD(SECOND, -?, NOW(6)))`,
			fmt.Sprintf("r%d", i), r.order, r.secsAgo)
	}
	db.MigrateRest(t)
	var got []string
	if err := db.Select(&got, `SELECT CONCAT_WS('/', order_id, audit_seq, repair_id) FROM reconciliation_audit
ORDER BY order_id, audit_seq`); err != nil {
		t.Fatal(err)
	}
	if want := "[7/1/r0 7/2/r3 7/3/r2 8/1/r1]"; fmt.Sprint(got) != want {
		t.Errorf("audit rows after the migration = %v, want %s", got, want)
	}

	ctx := context.Background()
	again := orderdb.Audit{RepairID: "r9", RunID: "run2", OrderID: 7, Seq: 3, Classification: "result_missing",
		Action: "apply_result", Outcome: "state_changed", Evidence: []byte(`{}`)}
	if err := orderdb.InsertAudit(ctx, db.DB, again); !errors.Is(err, orderdb.ErrAuditExists) {
		t.Fatalf("a second row numbered 3 for order 7: %v, want ErrAuditExists", err)
	}
	again.Seq = 4
	if err := orderdb.InsertAudit(ctx, db.DB, again); err != nil {
		t.Fatalf("the next row of order 7: %v", err)
	}
}
