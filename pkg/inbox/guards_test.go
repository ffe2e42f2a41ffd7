package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// The same event_id with another payload is not "already processed": Process
// says ErrPayloadMismatch and applies nothing. The same payload again is a
// duplicate; an inbox row from before the hash existed (NULL) counts as a
// match.
func TestSameEventIDWithAnotherPayloadIsAMismatch(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	c := inboxtest.Consumer(db.DB, "inventory", inboxtest.Increment)
	ctx := context.Background()
	e, other := processedWithATwin(t, c)
	var stored string
	if err := db.Get(&stored, `SELECT payload_sha256 FROM consumer_inbox WHERE event_id = ?`, e.EventID); err != nil || stored != inbox.PayloadHash(e.Payload) {
		t.Fatalf("stored hash %q (%v), want %q", stored, err, inbox.PayloadHash(e.Payload))
	}
	if err := c.Process(ctx, other); !errors.Is(err, inbox.ErrPayloadMismatch) || errors.Is(err, inbox.ErrAlreadyProcessed) {
		t.Fatalf("other payload: err = %v, want ErrPayloadMismatch (and not ErrAlreadyProcessed)", err)
	}
	if err := c.Process(ctx, e); !errors.Is(err, inbox.ErrAlreadyProcessed) {
		t.Fatalf("same payload: err = %v, want ErrAlreadyProcessed", err)
	}
	db.MustExec(`UPDATE consumer_inbox SET payload_sha256 = NULL WHERE event_id = ?`, e.EventID)
	if err := c.Process(ctx, other); !errors.Is(err, inbox.ErrAlreadyProcessed) {
		t.Fatalf("row without a hash: err = %v, want ErrAlreadyProcessed", err)
	}
	inboxtest.WantEffects(t, db.DB, 1)
	// A message without a body has a hash too (the empty body's): a row
	// without one would match any payload.
	empty := inboxtest.Event(events.OrderCreated)
	err := sqlxTx(t, db.DB, func(tx *sqlx.Tx) error {
		if err := inbox.ClaimPayload(ctx, tx, "inventory", empty.EventID, nil); err != nil {
			return err
		}
		return tx.GetContext(ctx, &stored, `SELECT payload_sha256 FROM consumer_inbox WHERE event_id = ?`, empty.EventID)
	})
	if err != nil || stored != inbox.PayloadHash([]byte{}) {
		t.Fatalf("hash stored for a claim without a body: %q (%v), want the empty body's %q", stored, err, inbox.PayloadHash([]byte{}))
	}
}

// processedWithATwin has p process a new event and returns it with its
// twin: the same event_id, another payload.
func processedWithATwin(t *testing.T, p interface {
	Process(context.Context, events.Envelope) error
}) (e, twin events.Envelope) {
	t.Helper()
	e = inboxtest.Event(events.OrderCreated)
	twin = e
	twin.Payload = []byte(`{"order_id":"2"}`)
	if err := p.Process(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	return e, twin
}

func sqlxTx(t *testing.T, db *sqlx.DB, fn func(tx *sqlx.Tx) error) error {
	t.Helper()
	tx, err := db.Beginx()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	return fn(tx)
}

// An external handler (a PSP call) is not called again for a known event_id
// with another payload.
func TestExternalHandlerIsNotCalledForAMismatch(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	calls := 0
	c := inbox.NewConsumer(inbox.Config{Name: "payment-psp", DB: db.DB, Log: quiet,
		External: map[events.Type]inbox.ExternalHandler{events.OrderCreated: func(ctx context.Context, e events.Envelope) (inbox.Handler, error) {
			calls++
			return inboxtest.Increment, nil
		}}})
	ctx := context.Background()
	_, other := processedWithATwin(t, c)
	if err := c.Process(ctx, other); !errors.Is(err, inbox.ErrPayloadMismatch) {
		t.Fatalf("err = %v, want ErrPayloadMismatch", err)
	}
	if calls != 1 || inboxtest.Effects(t, db.DB) != 1 {
		t.Fatalf("external calls = %d effects = %d, want 1 and 1", calls, inboxtest.Effects(t, db.DB))
	}
}

// Through the broker: the mismatching copy becomes a dead letter with the
// reason and counts in consumer_payload_mismatch_total; the first effect and
// its inbox row are untouched.
func TestPayloadMismatchIsADeadLetterAndAnAlert(t *testing.T) {
	t.Parallel()
	inboxtest.EachBatch(t, func(t *testing.T, batch int) {
		db := inboxtest.DB(t)
		c, reg := inboxtest.Metered(db.DB, "inventory", inboxtest.Increment)
		f := inboxtest.ConsumeBatch(t, c.HandleBatch, 0, batch)
		e := inboxtest.Event(events.OrderCreated)
		f.Publish(t, inboxtest.Message(e))
		inboxtest.WaitFor(t, "the first copy to be applied", func() bool { return inboxtest.Effects(t, db.DB) == 1 })
		other := e
		other.Payload = []byte(`{"order_id":"1","note":"tampered"}`)
		f.Publish(t, inboxtest.Message(other))
		dl := inboxtest.WaitDeadLetter(t, db.DB, "inventory", e.EventID)
		if !strings.Contains(dl.Reason, "same event_id, different payload") || string(dl.Payload) != string(other.Payload) {
			t.Fatalf("dead letter reason %q payload %s, want the mismatch reason and the second payload", dl.Reason, dl.Payload)
		}
		inboxtest.WantCounter(t, reg, "consumer_payload_mismatch_total", "inventory", 1)
		inboxtest.WantCounter(t, reg, "consumer_duplicates_suppressed_total", "inventory", 0)
		var stored string
		if err := db.Get(&stored, `SELECT payload_sha256 FROM consumer_inbox WHERE event_id = ?`, e.EventID); err != nil || stored != inbox.PayloadHash(e.Payload) {
			t.Fatalf("inbox hash %q (%v), want the first payload's", stored, err)
		}
		inboxtest.WantEffects(t, db.DB, 1)
	})
}

// A message older than the replay window is not applied: it is a dead
// letter with the reason, and no inbox row or effect is written.
func TestTooOldMessageIsADeadLetter(t *testing.T) {
	t.Parallel()
	inboxtest.EachBatch(t, func(t *testing.T, batch int) {
		db := inboxtest.DB(t)
		c := inboxtest.Consumer(db.DB, "inventory", inboxtest.Increment) // default replay window: 168h
		f := inboxtest.ConsumeBatch(t, c.HandleBatch, 0, batch)
		e := inboxtest.Event(events.OrderCreated)
		e.OccurredAt = time.Now().Add(-200 * time.Hour)
		f.Publish(t, inboxtest.Message(e))
		fresh := inboxtest.Event(events.OrderCreated)
		fresh.OccurredAt = time.Now()
		f.Publish(t, inboxtest.Message(fresh))
		dl := inboxtest.WaitDeadLetter(t, db.DB, "inventory", e.EventID)
		for _, want := range []string{"older than the inbox replay window (168h0m0s)", "its inbox row may have been deleted; apply by hand after checking"} {
			if !strings.Contains(dl.Reason, want) {
				t.Errorf("reason %q, want it to contain %q", dl.Reason, want)
			}
		}
		inboxtest.WaitFor(t, "the fresh message to be applied", func() bool { return inboxtest.Effects(t, db.DB) == 1 })
		if n := inboxtest.InboxRows(t, db.DB, e.EventID); n != 0 {
			t.Fatalf("inbox rows of the old event = %d, want 0", n)
		}
	})
}

// delivery builds a delivery as the consume loop hands it over, for tests
// that call Handle directly (its decision is not acked anywhere).
func delivery(e events.Envelope, attempt int, firstFailed time.Time) rabbit.Delivery {
	p := inboxtest.Message(e)
	return rabbit.Delivery{Delivery: amqp.Delivery{MessageId: p.MessageId, Type: p.Type, ContentType: p.ContentType,
		Timestamp: p.Timestamp, Headers: p.Headers, Body: p.Body}, Queue: "q", Attempt: attempt, FirstFailedAt: firstFailed}
}

// Without a timestamp, the first failure time dates the message; an old
// event the inbox still knows is a plain duplicate, not a dead letter.
func TestReplayWindowUsesFirstFailureAndTheInbox(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	c := inbox.NewConsumer(inbox.Config{Name: "inventory", DB: db.DB, Log: quiet, ReplayWindow: time.Hour,
		Handlers: map[events.Type]inbox.Handler{events.OrderCreated: inboxtest.Increment}})
	ctx := context.Background()

	noStamp := inboxtest.Event(events.OrderCreated) // OccurredAt zero: no AMQP timestamp
	c.Handle(ctx, delivery(noStamp, 2, time.Now().Add(-2*time.Hour)))
	if dl, ok := inboxtest.DeadLetter(t, db.DB, "inventory", noStamp.EventID); !ok || !strings.Contains(dl.Reason, "older than the inbox replay window (1h0m0s)") {
		t.Fatalf("dead letter %+v (found %v), want the replay window reason", dl, ok)
	}

	known := inboxtest.Event(events.OrderCreated)
	if err := c.Process(ctx, known); err != nil {
		t.Fatal(err)
	}
	known.OccurredAt = time.Now().Add(-3 * time.Hour)
	if dec := c.Handle(ctx, delivery(known, 1, time.Time{})); dec.Reason != "" {
		t.Fatalf("decision %+v, want a plain ack", dec)
	}
	if _, ok := inboxtest.DeadLetter(t, db.DB, "inventory", known.EventID); ok {
		t.Fatal("an old duplicate the inbox still knows became a dead letter")
	}
	inboxtest.WantEffects(t, db.DB, 1)
}

// Retries stop at MaxAttempts and at MaxRetryAge, whichever comes first.
func TestRetriesAreCappedByAttemptsAndTime(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	failing := func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
		return fmt.Errorf("simulated: %w", inboxtest.ErrLockWait)
	}
	c := inbox.NewConsumer(inbox.Config{Name: "inventory", DB: db.DB, Log: quiet, MaxAttempts: 8, MaxRetryAge: 15 * time.Minute,
		Handlers: map[events.Type]inbox.Handler{events.OrderCreated: failing}})
	ctx := context.Background()
	tests := []struct {
		name      string
		attempt   int
		failedAgo time.Duration // the first failure, measured right before the delivery
		dead      string        // reason substring, "" for a retry
	}{
		{"early attempt, recent failure: retry", 2, time.Minute, ""},
		{"attempt cap", 8, time.Minute, "gave up after 8 attempts"},
		{"time cap", 3, time.Hour, "gave up after 3 attempts over 1h0m0s"},
	}
	for _, tt := range tests {
		e := inboxtest.Event(events.OrderCreated)
		c.Handle(ctx, delivery(e, tt.attempt, time.Now().Add(-tt.failedAgo)))
		dl, ok := inboxtest.DeadLetter(t, db.DB, "inventory", e.EventID)
		switch {
		case tt.dead == "" && ok:
			t.Errorf("%s: dead-lettered (%q), want a retry", tt.name, dl.Reason)
		case tt.dead != "" && (!ok || !strings.Contains(dl.Reason, tt.dead)):
			t.Errorf("%s: dead letter %q (found %v), want reason containing %q", tt.name, dl.Reason, ok, tt.dead)
		}
	}
}

// Head-of-line: one message that always fails transiently sits first in the
// queue, twenty good messages behind it, one worker. The failing message is
// moved to a retry queue after each attempt, so the twenty are processed
// while it waits; it ends as a dead letter after MaxAttempts. Had it been
// retried in place (or requeued at the head), its second attempt would come
// before the twenty.
func TestPoisonMessageDoesNotBlockTheOthers(t *testing.T) {
	t.Parallel()
	inboxtest.EachBatch(t, func(t *testing.T, batch int) {
		db := inboxtest.DB(t)
		poison := inboxtest.Event(events.OrderCreated)
		var mu sync.Mutex
		var doneAtAttempt []int // good messages processed when each poison attempt ran
		good := 0
		// The retry waits at least 1.5 s: time for the twenty on a busy
		// machine, which is what the assertion below needs.
		c := inboxtest.Made(inbox.Config{Name: "inventory", DB: db.DB, Log: quiet, MaxAttempts: 3,
			Backoff: retry.Backoff{Base: 3 * time.Second, Cap: 3 * time.Second}},
			inboxtest.OnCreated(func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
				mu.Lock()
				defer mu.Unlock()
				if e.EventID == poison.EventID {
					doneAtAttempt = append(doneAtAttempt, good)
					return fmt.Errorf("simulated: %w", inboxtest.ErrLockWait)
				}
				if err := inboxtest.Increment(ctx, tx, e); err != nil {
					return err
				}
				good++ // counted before commit; the commit of the last one is waited for below
				return nil
			}), nil)
		f := inboxtest.ConsumeBatch(t, c.HandleBatch, 1, batch)
		f.Publish(t, inboxtest.Message(poison))
		for i := 0; i < 20; i++ {
			f.Publish(t, inboxtest.Message(inboxtest.Event(events.OrderCreated)))
		}
		dl := inboxtest.WaitDeadLetter(t, db.DB, "inventory", poison.EventID)
		if dl.Attempts != 3 || !strings.Contains(dl.Reason, "gave up after 3 attempts") {
			t.Fatalf("dead letter attempts %d reason %q, want 3 and the cap", dl.Attempts, dl.Reason)
		}
		inboxtest.WaitFor(t, "the twenty good messages", func() bool { return inboxtest.Effects(t, db.DB) == 20 })
		mu.Lock()
		defer mu.Unlock()
		t.Logf("good messages done at each poison attempt: %v", doneAtAttempt)
		if len(doneAtAttempt) != 3 {
			t.Fatalf("poison attempts = %d, want 3", len(doneAtAttempt))
		}
		if doneAtAttempt[1] != 20 {
			t.Fatalf("at the poison's second attempt %d of 20 good messages were done, want all 20 (no head-of-line blocking)", doneAtAttempt[1])
		}
	})
}

func TestPayloadHashIgnoresEncodingOnly(t *testing.T) {
	t.Parallel()
	base := inbox.PayloadHash([]byte(`{"order_id":"1","items":[{"sku":"SKU-1","quantity":2}],"total_cents":17800}`))
	tests := []struct {
		name    string
		payload string
		same    bool
	}{
		{"pretty-printed", "{\n  \"order_id\": \"1\",\n  \"items\": [ { \"sku\": \"SKU-1\", \"quantity\": 2 } ],\n  \"total_cents\": 17800\n}", true},
		{"keys reordered", `{"total_cents":17800,"items":[{"quantity":2,"sku":"SKU-1"}],"order_id":"1"}`, true},
		{"escaped the same", `{"order_id":"\u0031","items":[{"sku":"SKU-1","quantity":2}],"total_cents":17800}`, true},
		{"another quantity", `{"order_id":"1","items":[{"sku":"SKU-1","quantity":3}],"total_cents":17800}`, false},
		{"number written otherwise", `{"order_id":"1","items":[{"sku":"SKU-1","quantity":2.0}],"total_cents":17800}`, false},
		{"items removed", `{"order_id":"1","items":[],"total_cents":17800}`, false},
		{"not JSON", `{"order_id":`, false},
	}
	for _, tt := range tests {
		if got := inbox.PayloadHash([]byte(tt.payload)) == base; got != tt.same {
			t.Errorf("%s: same hash = %v, want %v", tt.name, got, tt.same)
		}
	}
}

// A handler that panics does not take the consumer down: its transaction
// rolls back, and the delivery is decided like a failed attempt, retried
// later, a dead letter with the panic as its reason once past the budget.
func TestPanickingHandlerIsAFailedAttempt(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	c := inbox.NewConsumer(inbox.Config{Name: "inventory", DB: db.DB, Log: quiet, MaxAttempts: 3,
		Handlers: map[events.Type]inbox.Handler{events.OrderCreated: func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
			if err := inboxtest.Increment(ctx, tx, e); err != nil {
				return err
			}
			var m map[string]int
			m["boom"]++ // a nil map: a bug in the handler
			return nil
		}}})
	ctx := context.Background()
	e := inboxtest.Event(events.OrderCreated)
	if d := c.Handle(ctx, delivery(e, 1, time.Time{})); d == rabbit.Ack() || d.Abandoned() {
		t.Fatalf("decision after a panic on the first attempt = %+v, want a delayed retry", d)
	}
	if _, ok := inboxtest.DeadLetter(t, db.DB, "inventory", e.EventID); ok {
		t.Fatal("dead-lettered on the first attempt, want a retry")
	}
	if d := c.Handle(ctx, delivery(e, 3, time.Now())); d != rabbit.Ack() {
		t.Fatalf("decision past the attempt budget = %+v, want ack of a recorded dead letter", d)
	}
	dl, ok := inboxtest.DeadLetter(t, db.DB, "inventory", e.EventID)
	if !ok || !strings.Contains(dl.Reason, "handler panicked") || !strings.Contains(dl.Reason, "nil map") {
		t.Fatalf("dead letter %q (found %v), want the panic as its reason", dl.Reason, ok)
	}
	inboxtest.WantEffects(t, db.DB, 0) // the panicking attempts rolled back
	inboxtest.WantInboxRows(t, db.DB, e.EventID, 0)
}

// The wait before a retry is the chapter's: min(cap, base*2^(attempt-1))
// is its bound and a random wait inside [bound/2, bound] the jitter
// (有限重试与死信: 退避可按 min(cap, base × 2^attempt) 计算上限后加入随机抖动), so a
// burst of failures does not come back in lockstep and no wait exceeds the
// cap, however many attempts a message has had.
func TestRetryWaitsAreCappedAndJittered(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	failing := func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
		return fmt.Errorf("simulated: %w", inboxtest.ErrLockWait)
	}
	b := retry.Backoff{Base: 100 * time.Millisecond, Cap: time.Second}
	c := inbox.NewConsumer(inbox.Config{Name: "inventory", DB: db.DB, Log: quiet, Backoff: b,
		MaxAttempts: 100, MaxRetryAge: time.Hour,
		Handlers: map[events.Type]inbox.Handler{events.OrderCreated: failing}})
	ctx := context.Background()
	for _, attempt := range []int{1, 2, 4, 6, 9} {
		bound := min(b.Cap, b.Base<<(attempt-1))
		seen := map[time.Duration]bool{}
		for range 8 {
			dec := c.Handle(ctx, delivery(inboxtest.Event(events.OrderCreated), attempt, time.Now()))
			w := dec.Delay()
			if w < bound/2 || w > bound {
				t.Fatalf("attempt %d: retry in %v (%q), want a wait within [%v, %v]: min(cap %v, base %v*2^(attempt-1)), jitter inside it",
					attempt, w, dec.Reason, bound/2, bound, b.Cap, b.Base)
			}
			seen[w] = true
		}
		if len(seen) < 4 {
			t.Errorf("attempt %d: 8 retries waited only %d distinct times: the jitter is missing, failures come back in lockstep", attempt, len(seen))
		}
	}
}
