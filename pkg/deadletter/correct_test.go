package deadletter_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/deadletter"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
)

// A message whose payload the consumer can never process is a dead letter.
// Redriven as it is (a replay: the same event_id), it fails again. An
// operator decides on a correction instead (the chapter, 有限重试与死信: 如果确实
// 需要发起新的纠正操作，应分配新事件 ID，并记录它与原事件的关系): a new event with a fixed
// payload, an event_id of its own and the header corrects_event_id = the
// dead one. The consumer takes it as a new event and applies it once, with
// the relation in hand; the row is 'corrected' with the correction's id and
// the reason. The same correction sent again (its mark was lost) has the
// same event_id, and the inbox drops it.
func TestCorrectionOfADeadLetterIsANewEventThatNamesIt(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	var seen inboxtest.Corrects
	c, reg := inboxtest.Metered(db.DB, "inventory", seen.Record(func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
		if !strings.Contains(string(e.Payload), `"quantity"`) {
			return inbox.Permanent(errors.New("order.created without a quantity"))
		}
		return inboxtest.Increment(ctx, tx, e)
	}))
	f := inboxtest.Consume(t, c.Handle, 1)
	e := inboxtest.Event(events.OrderCreated) // {"order_id":"1"}: no quantity, never processable
	e.OccurredAt = time.Now().Add(-time.Hour).Truncate(time.Second)
	f.Publish(t, inboxtest.Message(e))
	dl := inboxtest.WaitDeadLetter(t, db.DB, "inventory", e.EventID)
	r := redriver(t, db.DB, f)
	ctx := context.Background()

	// A replay cannot help: redriven as it is, it fails again (the
	// consumer may fail it again before the redrive marks the row:
	// "changed", the row dead with the new attempt).
	if res := redrive(t, r, deadletter.Selection{IDs: []uint64{dl.ID}}); res[0].Outcome != deadletter.OutcomeRedriven &&
		res[0].Outcome != deadletter.OutcomeChanged {
		t.Fatalf("redrive = %+v", res)
	}
	inboxtest.WaitFor(t, "the redriven message to fail again", func() bool {
		row, _ := inboxtest.DeadLetter(t, db.DB, "inventory", e.EventID)
		return row.Status == deadletter.StatusDead && row.Attempts > dl.Attempts
	})

	wantBadCorrectionsRefused(t, r, dl.ID)

	fix := deadletter.Correction{Payload: json.RawMessage(`{"order_id": "1", "quantity": 2}`),
		Reason: "producer bug 123 dropped the quantity; the order had 2"}
	res, err := r.Correct(ctx, dl.ID, fix)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != deadletter.OutcomeCorrected || res.EventID != e.EventID || res.Queue != f.Queue {
		t.Fatalf("correct = %+v, want corrected, of %s, on %s", res, e.EventID, f.Queue)
	}
	if _, err := uuid.Parse(res.CorrectionEventID); err != nil || res.CorrectionEventID == e.EventID {
		t.Fatalf("correction event id %q, want a UUID other than %s", res.CorrectionEventID, e.EventID)
	}
	inboxtest.WaitFor(t, "the correction to be applied", func() bool { return inboxtest.Effects(t, db.DB) == 1 })
	if got, _ := seen.Of(res.CorrectionEventID); got != e.EventID {
		t.Fatalf("the consumer saw the correction correcting %q, want %s (the header)", got, e.EventID)
	}
	if a, b := inboxtest.InboxRows(t, db.DB, res.CorrectionEventID), inboxtest.InboxRows(t, db.DB, e.EventID); a != 1 || b != 0 {
		t.Fatalf("inbox rows: correction %d, original %d; want 1 and 0", a, b)
	}
	wantCorrected(t, db.DB, e.EventID, res.CorrectionEventID, fix.Reason)

	// Corrected already: nothing more.
	if res, err := r.Correct(ctx, dl.ID, fix); err != nil || res.Outcome != deadletter.OutcomeNotDead {
		t.Fatalf("second correct = %+v, %v; want not_dead", res, err)
	}
	// The same correction sent again (say its mark was lost): the same
	// event_id, a duplicate the inbox drops.
	db.MustExec(`UPDATE dead_letters SET status = 'dead' WHERE id = ?`, dl.ID)
	again, err := r.Correct(ctx, dl.ID, fix)
	if err != nil || again.CorrectionEventID != res.CorrectionEventID {
		t.Fatalf("the same correction again = %+v, %v; want the same event id %s", again, err, res.CorrectionEventID)
	}
	inboxtest.WaitFor(t, "the repeated correction to be dropped", func() bool {
		return inboxtest.Counter(t, reg, "consumer_duplicates_suppressed_total", "inventory") == 1
	})
	inboxtest.WantEffects(t, db.DB, 1)
}

// wantBadCorrectionsRefused checks that Correct refuses a correction of
// dead letter id without a reason, without a change of payload, or
// without JSON.
func wantBadCorrectionsRefused(t *testing.T, r *deadletter.Redriver, id uint64) {
	t.Helper()
	for _, bad := range []deadletter.Correction{
		{Payload: json.RawMessage(`{"order_id":"1","quantity":2}`)},
		{Payload: json.RawMessage(`{ "order_id": "1" }`), Reason: "same facts"},
		{Payload: json.RawMessage(`{"order_id":`), Reason: "broken"},
	} {
		if _, err := r.Correct(context.Background(), id, bad); !errors.Is(err, deadletter.ErrBadCorrection) {
			t.Fatalf("Correct(%s, %q) = %v, want ErrBadCorrection", bad.Payload, bad.Reason, err)
		}
	}
}

// wantCorrected checks that the dead letter of eventID is 'corrected' by
// the event correctionID, for reason.
func wantCorrected(t *testing.T, db *sqlx.DB, eventID, correctionID, reason string) {
	t.Helper()
	row, _ := inboxtest.DeadLetter(t, db, "inventory", eventID)
	if row.Status != deadletter.StatusCorrected || row.CorrectionEventID == nil || *row.CorrectionEventID != correctionID ||
		row.CorrectionReason == nil || *row.CorrectionReason != reason || row.RedrivenAt == nil {
		t.Fatalf("row = %+v, want corrected, with the correction's id and the reason", row)
	}
}

// A redrive is a replay: the message keeps its event_id and carries no
// corrects_event_id; a correction has a new id derived from the dead event
// and the payload: the same fix is the same event, another fix another.
func TestCorrectionMessageAndRedriveMessage(t *testing.T) {
	t.Parallel()
	e := inboxtest.Event(events.OrderCreated)
	headers, _ := jsonOf(inboxtest.Message(e).Headers)
	dl := deadletter.Letter{ID: 9, Consumer: "inventory", EventID: e.EventID, EventType: e.Type, Headers: headers, Payload: e.Payload}
	replay := deadletter.RedriveMessage(dl, "q")
	if replay.Publishing.MessageId != e.EventID || replay.Publishing.Headers[events.HeaderCorrectsEventID] != nil {
		t.Fatalf("redrive message %s with corrects %v, want %s and none", replay.Publishing.MessageId,
			replay.Publishing.Headers[events.HeaderCorrectsEventID], e.EventID)
	}
	now := time.Now()
	one := deadletter.CorrectionMessage(dl, "q", []byte(`{"order_id":"1","quantity":2}`), now)
	same := deadletter.CorrectionMessage(dl, "q", []byte(`{"order_id":"1","quantity":2}`), now.Add(time.Minute))
	other := deadletter.CorrectionMessage(dl, "q", []byte(`{"order_id":"1","quantity":3}`), now)
	if one.Publishing.MessageId == e.EventID || one.Publishing.MessageId != same.Publishing.MessageId ||
		one.Publishing.MessageId == other.Publishing.MessageId {
		t.Fatalf("correction ids %s, %s (same fix), %s (other fix); original %s", one.Publishing.MessageId,
			same.Publishing.MessageId, other.Publishing.MessageId, e.EventID)
	}
	if one.Publishing.Headers[events.HeaderCorrectsEventID] != e.EventID || string(one.Publishing.Body) != `{"order_id":"1","quantity":2}` ||
		one.Publishing.Headers[events.HeaderAggregateID] != "1" || !one.Publishing.Timestamp.Equal(now.UTC()) {
		t.Fatalf("correction = %+v, want the original's headers, corrects_event_id, the fixed body, a timestamp of now", one.Publishing)
	}
}
