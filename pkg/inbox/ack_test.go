package inbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// ackRecorder stands for the broker's side of a delivery: it records
// every ack, nack and reject sent on it.
type ackRecorder struct {
	mu      sync.Mutex
	settled []string
}

func (r *ackRecorder) note(what string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settled = append(r.settled, what)
	return nil
}

func (r *ackRecorder) Ack(uint64, bool) error        { return r.note("ack") }
func (r *ackRecorder) Nack(uint64, bool, bool) error { return r.note("nack") }
func (r *ackRecorder) Reject(uint64, bool) error     { return r.note("reject") }

func (r *ackRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.settled)
}

// The handler never settles a message itself: it returns its decision, and
// the consume loop acks after it returns, so after the transaction
// committed (三个 ACK 坑: 先 ACK 再提交，进程崩溃后消息已经移除，业务却没落库). A
// failed attempt is a delayed retry, never an ack; a committed one is an
// ack decision; while the business change runs, nothing has been acked.
// The same holds on the batch layer's way in, for a lone delivery and for
// a run of several.
func TestNothingIsAckedBeforeTheCommit(t *testing.T) {
	t.Parallel()
	db := inboxtest.DB(t)
	ctx := context.Background()
	var mu sync.Mutex
	failing := map[string]bool{}
	recorders := map[string]*ackRecorder{}
	ackedDuringEffect := 0
	c := inboxtest.Consumer(db.DB, "inventory", func(ctx context.Context, tx *sqlx.Tx, e events.Envelope) error {
		mu.Lock()
		if recorders[e.EventID].count() != 0 {
			ackedDuringEffect++
		}
		fail := failing[e.EventID]
		mu.Unlock()
		if fail {
			return fmt.Errorf("simulated: %w", inboxtest.ErrLockWait)
		}
		return inboxtest.Increment(ctx, tx, e)
	})
	delivery := func(fail bool) (rabbit.Delivery, *ackRecorder) {
		e := inboxtest.Event(events.OrderCreated)
		r := &ackRecorder{}
		d := inboxtest.Delivery("inventory.order-events", e)
		d.Acknowledger, d.DeliveryTag = r, 1
		mu.Lock()
		failing[e.EventID] = fail
		recorders[e.EventID] = r
		mu.Unlock()
		return d, r
	}
	ways := []struct {
		name   string
		handle func(ds []rabbit.Delivery) []rabbit.Decision
	}{
		{"Handle", func(ds []rabbit.Delivery) []rabbit.Decision {
			out := make([]rabbit.Decision, len(ds))
			for i, d := range ds {
				out[i] = c.Handle(ctx, d)
			}
			return out
		}},
		{"HandleBatch", func(ds []rabbit.Delivery) []rabbit.Decision { return c.HandleBatch(ctx, ds) }},
	}
	for _, way := range ways {
		for _, tt := range []struct {
			name  string
			fails []bool
		}{
			{"a failed attempt", []bool{true}},
			{"a committed event", []bool{false}},
			{"two events, one failing", []bool{false, true}},
		} {
			var ds []rabbit.Delivery
			var rs []*ackRecorder
			for _, fail := range tt.fails {
				d, r := delivery(fail)
				ds, rs = append(ds, d), append(rs, r)
			}
			decisions := way.handle(ds)
			for i, dec := range decisions {
				if n := rs[i].count(); n != 0 {
					t.Errorf("%s, %s: delivery %d was settled by the handler itself (%v): ACK only after COMMIT, by the consume loop",
						way.name, tt.name, i, rs[i].settled)
				}
				switch {
				case tt.fails[i] && (dec == rabbit.Ack() || dec == rabbit.AlreadyAcked()):
					t.Errorf("%s, %s: the failed delivery %d was decided %s, want a delayed retry", way.name, tt.name, i, describe(dec))
				case !tt.fails[i] && dec != rabbit.Ack():
					t.Errorf("%s, %s: the committed delivery %d was decided %s, want an ack", way.name, tt.name, i, describe(dec))
				}
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if ackedDuringEffect != 0 {
		t.Errorf("%d business changes ran after their message was acked, before their commit", ackedDuringEffect)
	}
}

func describe(d rabbit.Decision) string {
	switch d {
	case rabbit.Ack():
		return "ack"
	case rabbit.AlreadyAcked():
		return "nothing (the handler settled it itself)"
	}
	if d.Abandoned() {
		return "abandon"
	}
	return fmt.Sprintf("retry (%s)", d.Reason)
}
