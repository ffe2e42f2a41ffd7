package outbox_test

import (
	"context"
	"testing"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/sqldb/sqldbtest"
)

// The read API of the operator's view (List, OfAggregate, Summarize) and
// Requeue: a failed row goes back to pending with fresh attempts under the
// same event_id, a row in another status is left alone.
func TestRowsAndRequeue(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	ctx := context.Background()
	ids := addEvents(t, db.DB, events.OrderCreated, 3) // aggregates 1, 2, 3
	db.MustExec(`UPDATE outbox_events SET status = 'failed', attempts = 10 WHERE event_id = ?`, ids[0])
	db.MustExec(`UPDATE outbox_events SET status = 'sent', sent_at = NOW(6) WHERE event_id = ?`, ids[1])

	sum, err := outbox.Summarize(ctx, db.DB)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"pending": 1, "sending": 0, "sent": 1, "failed": 1}
	for s, n := range want {
		if sum.ByStatus[s] != n {
			t.Errorf("summary %s = %d, want %d (%v)", s, sum.ByStatus[s], n, sum.ByStatus)
		}
	}
	if sum.OldestPendingAge < 0 {
		t.Errorf("oldest pending age %g, want >= 0", sum.OldestPendingAge)
	}

	failed, err := outbox.List(ctx, db.DB, outbox.Filter{Status: outbox.StatusFailed, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != 1 || failed[0].EventID != ids[0] || failed[0].AggregateID != 1 || len(failed[0].Payload) == 0 {
		t.Fatalf("failed rows = %+v, want %s of aggregate 1 with its payload", failed, ids[0])
	}
	if _, err := outbox.List(ctx, db.DB, outbox.Filter{}); err == nil {
		t.Fatal("List without a limit: no error")
	}
	own, err := outbox.OfAggregate(ctx, db.DB, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(own) != 1 || own[0].EventID != ids[1] || own[0].Status != outbox.StatusSent || own[0].SentAt == nil {
		t.Fatalf("rows of aggregate 2 = %+v, want %s sent", own, ids[1])
	}

	// Only the rows in from move.
	for _, id := range ids[1:] {
		if done, err := outbox.Requeue(ctx, db.DB, id, outbox.StatusFailed); err != nil || done {
			t.Fatalf("requeue of non-failed %s = %v, %v; want false", id, done, err)
		}
	}
	if done, err := outbox.Requeue(ctx, db.DB, ids[0], outbox.StatusFailed); err != nil || !done {
		t.Fatalf("requeue of failed %s = %v, %v; want true", ids[0], done, err)
	}
	got := readRows(t, db.DB)
	if r := got[ids[0]]; r.Status != outbox.StatusPending || r.Attempts != 0 || r.ClaimToken != nil {
		t.Fatalf("requeued row = %+v, want pending with 0 attempts and no claim", r)
	}
	if r := got[ids[1]]; r.Status != outbox.StatusSent {
		t.Fatalf("sent row became %s, want it left alone", r.Status)
	}
}
