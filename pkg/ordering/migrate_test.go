package ordering_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/pressly/goose/v3"

	"github.com/relmsg/ordersaga/migrations"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
)

// Sequences written before they carried an aggregate type take the
// producer of the events parked for them, else of everything parked for
// their consumer; one whose producer cannot be told keeps an empty type (read
// by nobody) rather than a guess.
func TestSequencesOfBeforeAggregateTypesMigrate(t *testing.T) {
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
	fsys, err := migrations.For("inventory")
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectMySQL, db.DB, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 11); err != nil { // the ordering tables as they were
		t.Fatal(err)
	}
	for _, s := range []struct {
		consumer  string
		aggregate int
		last      int
	}{{"a", 1, 5}, {"b", 2, 3}, {"b", 3, 4}, {"c", 4, 7}} {
		db.MustExec(`INSERT INTO inbox_sequences (consumer_name, aggregate_id, last_version) VALUES (?, ?, ?)`, s.consumer, s.aggregate, s.last)
	}
	for i, pe := range []struct {
		consumer, eventType string
		aggregate           int
	}{{"a", "inventory.counted", 1}, {"b", "order.counted", 2}, {"c", "order.counted", 5}, {"c", "payment.counted", 6}} {
		db.MustExec(`INSERT INTO parked_events (consumer_name, event_id, event_type, aggregate_id, aggregate_version,
  expected_version, schema_version, payload, deadline_at) VALUES (?, ?, ?, ?, 9, 8, 1, '{}', NOW(6))`,
			pe.consumer, fmt.Sprintf("00000000-0000-0000-0000-%012d", i), pe.eventType, pe.aggregate)
	}
	if err := sqldb.Migrate(ctx, db, fsys, nil); err != nil {
		t.Fatal(err)
	}
	var seqs, parked []string
	if err := db.Select(&seqs, `SELECT CONCAT_WS('/', consumer_name, aggregate_type, aggregate_id, last_version)
FROM inbox_sequences ORDER BY consumer_name, aggregate_id`); err != nil {
		t.Fatal(err)
	}
	want := "[a/inventory/1/5 b/order/2/3 b/order/3/4 c//4/7]"
	if fmt.Sprint(seqs) != want {
		t.Errorf("sequences after the migration = %v, want %s", seqs, want)
	}
	if err := db.Select(&parked, `SELECT CONCAT_WS('/', consumer_name, aggregate_type, aggregate_id) FROM parked_events
ORDER BY consumer_name, aggregate_id`); err != nil {
		t.Fatal(err)
	}
	want = "[a/inventory/1 b/order/2 c/order/5 c/payment/6]"
	if fmt.Sprint(parked) != want {
		t.Errorf("parked events after the migration = %v, want %s", parked, want)
	}
}
