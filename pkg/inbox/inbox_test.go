package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/deadletter"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
)

var quiet = slog.New(slog.DiscardHandler)

func TestSameEventTwiceHasOneEffect(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	c := inboxtest.Consumer(db.DB, "inventory", inboxtest.Increment)
	e := inboxtest.Event(events.OrderCreated)
	ctx := context.Background()
	if err := c.Process(ctx, e); err != nil {
		t.Fatalf("first delivery: %v", err)
	}
	if err := c.Process(ctx, e); !errors.Is(err, inbox.ErrAlreadyProcessed) {
		t.Fatalf("second delivery: err = %v, want ErrAlreadyProcessed", err)
	}
	inboxtest.WantEffects(t, db.DB, 1)
	inboxtest.WantInboxRows(t, db.DB, e.EventID, 1)
}

// Ten deliveries of one event on ten connections, released together. The
// first to insert its inbox row holds the key until it commits; the test
// waits until the other nine are really blocked on that key (visible in
// information_schema) before letting it commit, so the race is proven to
// have happened, not just hoped for. A rival that reaches the business
// change while the first one holds the event was not held back by the
// inbox (a check before the INSERT, say): then the waiting stops at once
// and the effects are counted.
func TestRacingDeliveriesOfOneEventHaveOneEffect(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	e := inboxtest.Event(events.OrderCreated)
	const n = 10
	var maxBlocked, inside atomic.Int32
	waitForRivals := func(ctx context.Context, tx *sqlx.Tx, env events.Envelope) error {
		inside.Add(1)
		// information_schema.innodb_trx is a cached snapshot that InnoDB
		// refreshes only when it has not been read for 100ms: poll it
		// slower than that until every rival is seen waiting.
		start := time.Now()
		for {
			var waiting int
			const q = `SELECT COUNT(*) FROM information_schema.innodb_trx
WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE CONCAT('%', ?, '%')`
			if err := db.Get(&waiting, q, env.EventID); err != nil {
				return err
			}
			if int32(waiting) > maxBlocked.Load() {
				maxBlocked.Store(int32(waiting))
			}
			if waiting == n-1 {
				break
			}
			if in := inside.Load(); in > 1 {
				t.Logf("%d deliveries reached the business change at once: the inbox held none of them back", in)
				break
			}
			if time.Since(start) > 20*time.Second {
				return fmt.Errorf("only %d of %d rivals blocked on the inbox key", waiting, n-1)
			}
			time.Sleep(150 * time.Millisecond)
		}
		return inboxtest.Increment(ctx, tx, env)
	}
	c := inboxtest.Consumer(db.DB, "inventory", waitForRivals)
	errs := make([]error, n)
	testutil.Together(n, func(i int) {
		errs[i] = c.Process(context.Background(), e)
	})
	winners, dups := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			winners++
		case errors.Is(err, inbox.ErrAlreadyProcessed):
			dups++
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	t.Logf("rivals seen blocked on the winner's inbox key: %d of %d", maxBlocked.Load(), n-1)
	if winners != 1 || dups != n-1 {
		t.Fatalf("winners=%d duplicates=%d, want 1 and %d", winners, dups, n-1)
	}
	inboxtest.WantEffects(t, db.DB, 1)
	inboxtest.WantInboxRows(t, db.DB, e.EventID, 1)
}

// A winner that rolls back must not block the event: the next delivery
// proceeds (the chapter: "if the first rolls back, the later one may still
// succeed").
func TestRolledBackClaimLetsTheNextDeliveryThrough(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	e := inboxtest.Event(events.OrderCreated)
	boom := errors.New("effect failed")
	failing := inboxtest.Consumer(db.DB, "inventory", func(ctx context.Context, tx *sqlx.Tx, env events.Envelope) error {
		if err := inboxtest.Increment(ctx, tx, env); err != nil {
			return err
		}
		return boom
	})
	if err := failing.Process(context.Background(), e); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want %v", err, boom)
	}
	if got, rows := inboxtest.Effects(t, db.DB), inboxtest.InboxRows(t, db.DB, e.EventID); got != 0 || rows != 0 {
		t.Fatalf("after the failed attempt: effects=%d inbox rows=%d, want both rolled back to 0", got, rows)
	}
	if err := inboxtest.Consumer(db.DB, "inventory", inboxtest.Increment).Process(context.Background(), e); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	inboxtest.WantEffects(t, db.DB, 1)
}

func TestDifferentConsumersEachProcessOnce(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	e := inboxtest.Event(events.OrderCreated)
	ctx := context.Background()
	for _, name := range []string{"inventory", "notifications", "inventory", "notifications"} {
		err := inboxtest.Consumer(db.DB, name, inboxtest.Increment).Process(ctx, e)
		if err != nil && !errors.Is(err, inbox.ErrAlreadyProcessed) {
			t.Fatal(err)
		}
	}
	inboxtest.WantEffects(t, db.DB, 2) // once per consumer name
	inboxtest.WantInboxRows(t, db.DB, e.EventID, 2)
	// The read API: every consumer's row of the event, in processing order.
	rows, err := inbox.Rows(ctx, db.DB, []string{e.EventID, uuid.NewString()})
	if err != nil || len(rows) != 2 || rows[0].Consumer != "inventory" || rows[1].Consumer != "notifications" ||
		rows[0].EventID != e.EventID || rows[1].ProcessedAt.Before(rows[0].ProcessedAt) {
		t.Fatalf("inbox.Rows = %+v, %v; want inventory's row then notifications'", rows, err)
	}
}

// A duplicate key raised by the business SQL is a failure, not "already
// processed": the attempt rolls back, inbox row included.
func TestBusinessDuplicateKeyIsNotTreatedAsProcessed(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	db.MustExec(`INSERT INTO unique_things VALUES ('taken')`)
	c := inboxtest.Consumer(db.DB, "inventory", func(ctx context.Context, tx *sqlx.Tx, _ events.Envelope) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO unique_things VALUES ('taken')`)
		return err
	})
	e := inboxtest.Event(events.OrderCreated)
	err := c.Process(context.Background(), e)
	if err == nil || errors.Is(err, inbox.ErrAlreadyProcessed) || !sqldb.IsDuplicateKey(err) {
		t.Fatalf("err = %v, want the business duplicate key error, not ErrAlreadyProcessed", err)
	}
	inboxtest.WantInboxRows(t, db.DB, e.EventID, 0) // rolled back with the attempt
}

func TestUnsupportedSchemaVersionIsInvalid(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	e := inboxtest.Event(events.OrderCreated)
	e.SchemaVersion = 2
	err := inboxtest.Consumer(db.DB, "inventory", inboxtest.Increment).Process(context.Background(), e)
	if !errors.Is(err, events.ErrInvalid) {
		t.Fatalf("err = %v, want events.ErrInvalid", err)
	}
	inboxtest.WantEffects(t, db.DB, 0)
}

// Poison messages go to dead_letters with the reason, while good messages
// behind them are processed.
func TestPoisonMessagesBecomeDeadLettersWithReason(t *testing.T) {
	t.Parallel()
	inboxtest.EachBatch(t, func(t *testing.T, batch int) {
		db := inboxtest.DB(t)
		c := inboxtest.Consumer(db.DB, "inventory", func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
			if _, err := events.Decode[events.OrderCreatedV1](e.Payload); err != nil {
				return err
			}
			return inboxtest.Increment(ctx, tx, e)
		})
		f := inboxtest.ConsumeBatch(t, c.HandleBatch, 0, batch)

		good := events.Envelope{EventID: uuid.NewString(), Type: events.OrderCreated, AggregateID: 9, AggregateVersion: 1, SchemaVersion: 1,
			Payload: []byte(`{"order_id":"9","customer_id":"c-1","items":[{"sku":"SKU-1","quantity":1,"unit_price_cents":100}],"total_cents":100,"currency":"EUR"}`)}
		badJSON := good
		badJSON.EventID = uuid.NewString()
		badJSON.Payload = []byte(`{"order_id":`)
		v2 := good
		v2.EventID = uuid.NewString()
		v2.SchemaVersion = 2
		noID := inboxtest.Message(good)
		noID.MessageId = "not-a-uuid"

		f.Publish(t, inboxtest.Message(badJSON))
		f.Publish(t, inboxtest.Message(v2))
		f.Publish(t, noID)
		f.Publish(t, inboxtest.Message(good))

		inboxtest.WaitFor(t, "three dead letters and one effect", func() bool {
			var n int
			_ = db.Get(&n, `SELECT COUNT(*) FROM dead_letters`)
			return n == 3 && inboxtest.Effects(t, db.DB) == 1
		})
		var dls []deadletter.Letter
		if err := db.Select(&dls, `SELECT id, consumer_name, event_id, event_type, routing_key, reason, attempts, first_failed_at, last_failed_at, status, redriven_at, headers, payload FROM dead_letters ORDER BY id`); err != nil {
			t.Fatal(err)
		}
		wantReasons := map[string]string{
			badJSON.EventID: "payload",
			v2.EventID:      "schema_version 2 not supported",
			"not-a-uuid":    "not a UUID",
		}
		for _, dl := range dls {
			want, ok := wantReasons[dl.EventID]
			if !ok {
				t.Errorf("unexpected dead letter %+v", dl)
				continue
			}
			if dl.Consumer != "inventory" || dl.Status != "dead" || dl.Attempts != 1 || len(dl.Payload) == 0 || !strings.Contains(dl.Reason, want) {
				t.Errorf("dead letter %s = consumer %q status %q attempts %d reason %q, want reason containing %q and the payload kept",
					dl.EventID, dl.Consumer, dl.Status, dl.Attempts, dl.Reason, want)
			}
		}
		inboxtest.WantInboxRows(t, db.DB, badJSON.EventID, 0)
	})
}

// A transient failure (here: the first two attempts hit a lock wait) is
// retried through the delay queue, not requeued at once, and the third
// attempt succeeds with one effect.
func TestTransientFailureIsRetriedAfterADelay(t *testing.T) {
	t.Parallel()
	inboxtest.EachBatch(t, func(t *testing.T, batch int) {
		db := inboxtest.DB(t)
		var mu sync.Mutex
		var attempts []time.Time
		c := inboxtest.Made(inbox.Config{Name: "inventory", DB: db.DB, Log: quiet,
			Backoff: retry.Backoff{Base: 300 * time.Millisecond, Cap: time.Second}},
			inboxtest.OnCreated(func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
				mu.Lock()
				attempts = append(attempts, time.Now())
				n := len(attempts)
				mu.Unlock()
				if n <= 2 {
					return fmt.Errorf("simulated: %w", inboxtest.ErrLockWait)
				}
				return inboxtest.Increment(ctx, tx, e)
			}), nil)
		f := inboxtest.ConsumeBatch(t, c.HandleBatch, 0, batch)
		f.Publish(t, inboxtest.Message(inboxtest.Event(events.OrderCreated)))
		inboxtest.WaitFor(t, "the third attempt to commit", func() bool { return inboxtest.Effects(t, db.DB) == 1 })
		mu.Lock()
		defer mu.Unlock()
		if len(attempts) != 3 {
			t.Fatalf("attempts = %d, want 3", len(attempts))
		}
		// Backoff base 300ms: the n-th wait is at least half its bound
		// min(cap, base*2^(n-1)) (equal jitter, pkg/base/retry).
		if gap := attempts[1].Sub(attempts[0]); gap < 150*time.Millisecond {
			t.Fatalf("first retry came after %v, want >= 150ms (a delayed retry, not an instant requeue)", gap)
		}
		if gap := attempts[2].Sub(attempts[1]); gap < 300*time.Millisecond {
			t.Fatalf("second retry came after %v, want >= 300ms (exponential)", gap)
		}
	})
}
