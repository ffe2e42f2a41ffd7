package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/outbox"
)

// A's lease expires while its publish is stalled; recovery hands the row
// back and B claims it. A resumes, confirmed, while B is still publishing:
// the row is 'sending' again, under B's token. A's mark-sent must change
// nothing (什么时候标记 sent: 按 event_id + claim_token + status 条件标记; A 无权覆盖
// B 的任务状态), and B's own mark then finds its claim intact. The status
// alone does not tell A's claim from B's; only the token does.
func TestOldClaimantCannotMarkWhileTheNewOneHolds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	ids := addEvents(t, f.db.DB, events.OrderCreated, 1)

	a := stall(ctx, f.dispatcher(outbox.Config{Lease: 300 * time.Millisecond}))
	// A's renewer still runs while it is stalled in its publish.
	b := f.dispatcher(outbox.Config{Backoff: retry.Backoff{Base: time.Millisecond, Cap: time.Millisecond}})
	expireAndRecover(t, f.db, b, ids[0])
	waitDue(t, f.db.DB)

	stalledB := stall(ctx, b)
	claimB := readRows(t, f.db.DB)[ids[0]]
	if claimB.Status != "sending" || claimB.ClaimToken == nil {
		t.Fatalf("B's claim: %+v, want 'sending' under a token", claimB)
	}

	resA := a.release(t) // A believes its publish was confirmed
	got := readRows(t, f.db.DB)[ids[0]]
	if resA.Sent != 0 || resA.Lost != 1 {
		t.Errorf("A: %+v, want 0 sent and 1 lost: its mark-sent must affect 0 rows", resA)
	}
	if got.Status != "sending" || got.ClaimToken == nil || *got.ClaimToken != *claimB.ClaimToken {
		t.Fatalf("row after A's mark-sent: status %s, token %v; want B's claim untouched ('sending', token %s)",
			got.Status, deref(got.ClaimToken), *claimB.ClaimToken)
	}

	if resB := stalledB.release(t); resB.Sent != 1 || resB.Lost != 0 {
		t.Fatalf("B: %+v, want its own claim marked sent", resB)
	}
	if r := readRows(t, f.db.DB)[ids[0]]; r.Status != "sent" || r.ClaimToken != nil {
		t.Fatalf("row after B: %+v, want sent", r)
	}
}

func deref(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}
