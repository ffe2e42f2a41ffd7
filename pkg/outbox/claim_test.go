package outbox_test

import (
	"context"
	"testing"
)

// A's lease expires while its publish is stalled; recovery hands the row
// back and B claims it. A resumes, confirmed, while B is still publishing:
// the row is 'sending' again, under B's token. A's mark-sent must change
// nothing (什么时候标记 sent: 按 event_id + claim_token + status 条件标记; A 无权覆盖
// B 的任务状态), and B's own mark then finds its claim intact. The status
// alone does not tell A's claim from B's; only the token does.
func TestOldClaimantCannotMarkWhileTheNewOneHolds(t *testing.T) {
	t.Parallel()
	f, id, a, b := stalledClaim(t) // A's renewer still runs while it is stalled in its publish
	expireAndRecover(t, f.db, b, id)
	waitDue(t, f.db.DB)

	stalledB := stall(context.Background(), b)
	claimB := readRows(t, f.db.DB)[id]
	if claimB.Status != "sending" || claimB.ClaimToken == nil {
		t.Fatalf("B's claim: %+v, want 'sending' under a token", claimB)
	}

	resA := a.release(t) // A believes its publish was confirmed
	got := readRows(t, f.db.DB)[id]
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
	if r := readRows(t, f.db.DB)[id]; r.Status != "sent" || r.ClaimToken != nil {
		t.Fatalf("row after B: %+v, want sent", r)
	}
}

func deref(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}
