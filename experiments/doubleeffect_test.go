package experiments

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/failpoint"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/wrongway"
)

// The concurrent-duplicate experiment with a consumer whose effect has no
// business key of its own (a counter): two deliveries of one event on two
// connections. The right way (inbox row first) applies it once; the wrong
// way (check, then insert) applies it twice. This is the anomaly the
// inventory service is spared only because its reservations have a primary
// key of their own.
func TestExperimentConcurrentDuplicateDoubleEffect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		wrong   bool
		effects int
	}{
		{"inbox row first", false, 1},
		{"wrong way: check then insert", true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := sqldbtest.New(t, "inventory")
			db.MustExec(`CREATE TABLE counters (name VARCHAR(20) PRIMARY KEY, n INT NOT NULL)`)
			db.MustExec(`INSERT INTO counters VALUES ('effects', 0)`)
			ww := wrongway.NewSet(nil)
			if tc.wrong {
				ww = wrongway.NewSet(map[wrongway.Switch]bool{wrongway.NoInbox: true})
			}
			reg := prometheus.NewRegistry()
			c := inbox.NewConsumer(inbox.Config{Name: "notifier", DB: db.DB, Log: slog.New(slog.DiscardHandler), Metrics: inbox.NewMetrics(reg),
				Handlers: map[events.Type]inbox.Handler{events.OrderCreated: func(ctx context.Context, tx *sqlx.Tx, _ events.Envelope) error {
					_, err := tx.ExecContext(ctx, `UPDATE counters SET n = n + 1 WHERE name = 'effects'`)
					return err
				}}})
			// The process wires the wrong ways around the right one, as a
			// service in demo mode does (pkg/process).
			handle := wrongway.Pick(ww, rabbit.Handler(c.Handle), c.WrongWays()...)
			// Both deliveries stop right after their "claim" (the inbox
			// INSERT, or the wrong way's SELECT) until both are there.
			fp := failpoint.NewRegistry()
			paused := 2
			if !tc.wrong {
				paused = 1 // the second one blocks on the first one's key instead
			}
			gate := fp.Pause("inbox.after-claim", paused)
			ctx := failpoint.WithRegistry(context.Background(), fp)
			e := events.Envelope{EventID: uuid.NewString(), Type: events.OrderCreated, AggregateID: 1,
				AggregateVersion: 1, SchemaVersion: 1, Payload: []byte(`{"order_id":"1"}`)}
			var wg sync.WaitGroup
			decisions := make([]rabbit.Decision, 2)
			for i := range decisions {
				wg.Add(1)
				go func() { defer wg.Done(); decisions[i] = handle()(ctx, inboxtest.Delivery("notifier.q", e)) }()
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				st := fp.Armed()
				if len(st) == 1 && st[0].Paused == paused {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("deliveries never met at the failpoint: %+v", st)
				}
				time.Sleep(5 * time.Millisecond)
			}
			// The right way: give the second delivery time to block on the
			// key (it cannot pass it while the first holds it).
			time.Sleep(100 * time.Millisecond)
			gate.Release()
			wg.Wait()
			var n, rows int
			db.Get(&n, `SELECT n FROM counters WHERE name = 'effects'`)
			db.Get(&rows, `SELECT COUNT(*) FROM consumer_inbox WHERE event_id = ?`, e.EventID)
			for i, d := range decisions {
				if d != rabbit.Ack() {
					t.Fatalf("delivery %d: decision %+v, want ack", i, d)
				}
			}
			dups := int(inboxtest.Counter(t, reg, "consumer_duplicates_suppressed_total", "notifier"))
			if n != tc.effects || rows != 1 {
				t.Fatalf("effects = %d, inbox rows = %d (duplicates reported: %d); want %d effect(s) and 1 row", n, rows, dups, tc.effects)
			}
			t.Logf("%s: %d effect(s) from two concurrent deliveries, %d inbox row, %d reported as duplicate", tc.name, n, rows, dups)
		})
	}
}
