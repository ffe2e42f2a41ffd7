package retention_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/deadletter"
	"github.com/relmsg/ordersaga/pkg/retention"
)

var quiet = slog.New(slog.DiscardHandler)

// seedInbox inserts n inbox rows of consumer and ages them by age.
func seedInbox(t *testing.T, db *sqlx.DB, consumer string, n int, age time.Duration) {
	t.Helper()
	for done := 0; done < n; {
		k := min(500, n-done)
		q := `INSERT INTO consumer_inbox (consumer_name, event_id) VALUES ` + strings.TrimSuffix(strings.Repeat("(?, ?), ", k), ", ")
		args := make([]any, 0, 2*k)
		for i := 0; i < k; i++ {
			args = append(args, consumer, uuid.NewString())
		}
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
		done += k
	}
	if age > 0 {
		db.MustExec(`UPDATE consumer_inbox SET processed_at = TIMESTAMPADD(MICROSECOND, ?, NOW(6)) WHERE consumer_name = ?`,
			-age.Microseconds(), consumer)
	}
}

// seedOutbox inserts n outbox rows in status, created, sent (if 'sent') and
// due age ago; tag goes into the event type so each group can be counted.
func seedOutbox(t *testing.T, db *sqlx.DB, tag, status string, n int, age time.Duration) {
	t.Helper()
	for done := 0; done < n; {
		k := min(500, n-done)
		q := `INSERT INTO outbox_events (event_id, aggregate_id, aggregate_version, event_type, payload) VALUES ` +
			strings.TrimSuffix(strings.Repeat(`(?, 1, 1, ?, '{}'), `, k), ", ")
		args := make([]any, 0, 2*k)
		for i := 0; i < k; i++ {
			args = append(args, uuid.NewString(), tag)
		}
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
		done += k
	}
	// Age them the way the dispatcher leaves them: due, claimed, sent.
	db.MustExec(`UPDATE outbox_events SET status = ?,
  created_at = TIMESTAMPADD(MICROSECOND, ?, NOW(6)), next_attempt_at = TIMESTAMPADD(MICROSECOND, ?, NOW(6)),
  sent_at = IF(? = 'sent', TIMESTAMPADD(MICROSECOND, ?, NOW(6)), NULL)
WHERE event_type = ?`, status, -age.Microseconds(), -age.Microseconds(), status, -(age - time.Second).Microseconds(), tag)
}

func count(t *testing.T, db *sqlx.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Get(&n, q, args...); err != nil {
		t.Fatal(err)
	}
	return n
}

// Old inbox rows and old sent outbox rows go, in batches of Batch and at
// most MaxBatches per run; recent rows, failed/pending outbox rows, dead
// letters and parked rows stay.
func TestRetentionDeletesOnlyExpiredRowsInBatches(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "inventory")
	const window = 168 * time.Hour
	seedInbox(t, db.DB, "old", 2500, window+time.Hour)
	seedInbox(t, db.DB, "inside", 7, window-time.Hour)
	seedInbox(t, db.DB, "recent", 5, 0)
	seedOutbox(t, db.DB, "sent.old", "sent", 1500, 73*time.Hour)
	seedOutbox(t, db.DB, "sent.recent", "sent", 4, time.Hour)
	seedOutbox(t, db.DB, "failed.old", "failed", 3, 500*time.Hour)
	seedOutbox(t, db.DB, "pending.old", "pending", 2, 500*time.Hour)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if err := deadletter.Record(ctx, db.DB, deadletter.Letter{Consumer: "inventory", EventID: uuid.NewString(), Reason: "old", Payload: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	db.MustExec(`UPDATE dead_letters SET first_failed_at = NOW(6) - INTERVAL 1000 HOUR, last_failed_at = NOW(6) - INTERVAL 1000 HOUR`)
	db.MustExec(`INSERT INTO event_gaps (consumer_name, aggregate_id, event_id, event_type, received_version, expected_version, detected_at, deadline_at)
VALUES ('inventory', 1, ?, 'order.cancelled', 3, 2, NOW(6) - INTERVAL 1000 HOUR, NOW(6) - INTERVAL 999 HOUR)`, uuid.NewString())

	reg := prometheus.NewRegistry()
	c := retention.New(db.DB, retention.Config{InboxWindow: window, OutboxWindow: 72 * time.Hour, Batch: 1000, MaxBatches: 2,
		Log: quiet, Registerer: reg})
	d, err := c.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Inbox != 2000 || d.Outbox != 1500 {
		t.Fatalf("first run deleted %+v, want inbox 2000 (two batches of 1000, the run's bound) and outbox 1500", d)
	}
	d, err = c.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Inbox != 500 || d.Outbox != 0 {
		t.Fatalf("second run deleted %+v, want the remaining 500 inbox rows and no outbox rows", d)
	}
	d, _ = c.RunOnce(ctx)
	if d != (retention.Deleted{}) {
		t.Fatalf("third run deleted %+v, want nothing", d)
	}

	checks := []struct {
		what string
		q    string
		want int
	}{
		{"old inbox rows", `SELECT COUNT(*) FROM consumer_inbox WHERE consumer_name = 'old'`, 0},
		{"inbox rows inside the window", `SELECT COUNT(*) FROM consumer_inbox WHERE consumer_name = 'inside'`, 7},
		{"recent inbox rows", `SELECT COUNT(*) FROM consumer_inbox WHERE consumer_name = 'recent'`, 5},
		{"old sent outbox rows", `SELECT COUNT(*) FROM outbox_events WHERE event_type = 'sent.old'`, 0},
		{"recent sent outbox rows", `SELECT COUNT(*) FROM outbox_events WHERE event_type = 'sent.recent'`, 4},
		{"old failed outbox rows", `SELECT COUNT(*) FROM outbox_events WHERE status = 'failed'`, 3},
		{"old pending outbox rows", `SELECT COUNT(*) FROM outbox_events WHERE status = 'pending'`, 2},
		{"old dead letters", `SELECT COUNT(*) FROM dead_letters`, 3},
		{"old parked gaps", `SELECT COUNT(*) FROM event_gaps`, 1},
	}
	for _, c := range checks {
		if got := count(t, db.DB, c.q); got != c.want {
			t.Errorf("%s: %d left, want %d", c.what, got, c.want)
		}
	}
	if got := deleted(t, reg); got != "consumer_inbox=2500 outbox_events=1500" {
		t.Errorf("retention_deleted_total = %s, want consumer_inbox=2500 outbox_events=1500", got)
	}
}

func deleted(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, mf := range mfs {
		if mf.GetName() != "retention_deleted_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			parts = append(parts, fmt.Sprintf("%s=%.0f", m.GetLabel()[0].GetValue(), m.GetCounter().GetValue()))
		}
	}
	return strings.Join(parts, " ")
}

// Two cleaners on separate connection pools, released together, over the
// same expired rows in small batches: every row is deleted once (the counts
// add up exactly) and neither fails.
func TestRacingCleanersDeleteEachRowOnce(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	seedInbox(t, db.DB, "old", 4000, 200*time.Hour)
	seedInbox(t, db.DB, "recent", 10, 0)
	seedOutbox(t, db.DB, "sent.old", "sent", 3000, 100*time.Hour)
	seedOutbox(t, db.DB, "failed.old", "failed", 5, 100*time.Hour)

	const n = 2
	results := make([]retention.Deleted, n)
	errs := make([]error, n)
	cleaners := make([]*retention.Cleaner, n)
	for i := 0; i < n; i++ {
		pool, err := sqldb.Open(context.Background(), sqldb.Config{DSN: db.DSN, MaxOpenConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pool.Close() })
		cleaners[i] = retention.New(pool, retention.Config{Batch: 100, MaxBatches: 1000, Log: quiet})
	}
	testutil.Together(n, func(i int) {
		results[i], errs[i] = cleaners[i].RunOnce(context.Background())
	})
	var sum retention.Deleted
	for i := range results {
		if errs[i] != nil {
			t.Errorf("cleaner %d failed: %v", i, errs[i])
		}
		sum.Inbox += results[i].Inbox
		sum.Outbox += results[i].Outbox
	}
	t.Logf("cleaner results: %+v", results)
	if sum.Inbox != 4000 || sum.Outbox != 3000 {
		t.Fatalf("deleted in total %+v, want exactly inbox 4000 and outbox 3000 (each row once)", sum)
	}
	if got := count(t, db.DB, `SELECT COUNT(*) FROM consumer_inbox`); got != 10 {
		t.Fatalf("inbox rows left %d, want the 10 recent", got)
	}
	if got := count(t, db.DB, `SELECT COUNT(*) FROM outbox_events`); got != 5 {
		t.Fatalf("outbox rows left %d, want the 5 failed", got)
	}
}

// The delete statements use their index (no full scan per batch).
func TestRetentionDeletesUseAnIndex(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	seedInbox(t, db.DB, "old", 200, 200*time.Hour)
	seedOutbox(t, db.DB, "sent.old", "sent", 200, 100*time.Hour)
	db.MustExec(`ANALYZE TABLE consumer_inbox, outbox_events`)
	for _, tt := range []struct{ q, key string }{
		{`EXPLAIN DELETE FROM consumer_inbox WHERE processed_at < TIMESTAMPADD(MICROSECOND, -1000, NOW(6)) ORDER BY processed_at LIMIT 10`, "ix_inbox_processed_at"},
		{`EXPLAIN SELECT event_id FROM outbox_events FORCE INDEX (ix_dispatch) WHERE status = 'sent' AND next_attempt_at < TIMESTAMPADD(MICROSECOND, -1000, NOW(6))
  AND sent_at < TIMESTAMPADD(MICROSECOND, -1000, NOW(6)) ORDER BY next_attempt_at LIMIT 10`, "ix_dispatch"},
	} {
		var plan []map[string]any
		rows, err := db.Queryx(tt.q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			m := map[string]any{}
			if err := rows.MapScan(m); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, m)
		}
		rows.Close()
		if len(plan) != 1 || fmt.Sprintf("%s", plan[0]["key"]) != tt.key || strings.Contains(fmt.Sprintf("%s", plan[0]["Extra"]), "filesort") {
			t.Errorf("plan key %s extra %s, want key %s and no filesort", plan[0]["key"], plan[0]["Extra"], tt.key)
		}
	}
}

// A service's own table (Add) is drained like the messaging tables:
// batches until a short one, counted under its name.
func TestAddedTablesAreDrained(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	reg := prometheus.NewRegistry()
	c := retention.New(db.DB, retention.Config{Batch: 10, Log: quiet, Registerer: reg})
	left := 25
	var batches []int
	c.Add(retention.Table{Name: "keys", Delete: func(_ context.Context, _ *sqlx.DB, batch int) (int64, error) {
		n := min(batch, left)
		left -= n
		batches = append(batches, n)
		return int64(n), nil
	}})
	d, err := c.RunOnce(context.Background())
	if err != nil || d.Added != 25 || fmt.Sprint(batches) != "[10 10 5]" {
		t.Fatalf("RunOnce = %+v, %v, batches %v; want 25 deleted in [10 10 5]", d, err, batches)
	}
}
