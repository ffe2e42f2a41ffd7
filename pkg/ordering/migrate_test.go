package ordering_test

import (
	"fmt"
	"testing"

	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
)

// Sequences written before they carried an aggregate type take the
// producer of the events parked for them, else of everything parked for
// their consumer; one whose producer cannot be told keeps an empty type (read
// by nobody) rather than a guess.
func TestSequencesOfBeforeAggregateTypesMigrate(t *testing.T) {
	t.Parallel()
	db := sqldbtest.NewAt(t, "inventory", 11) // the ordering tables as they were
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
	db.MigrateRest(t)
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
