package orderapp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/inbox/batch"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderapp"
	"github.com/relmsg/ordersaga/services/order/internal/orderbindings"
)

var quiet = slog.New(slog.DiscardHandler)

type fixture struct {
	db    *sqlx.DB
	app   *orderapp.App
	wakes *atomic.Int32
	cons  consumer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db := sqldbtest.New(t, "order")
	var wakes atomic.Int32
	app := orderapp.New(db.DB, func() { wakes.Add(1) }, quiet, orderapp.Config{})
	cons := newConsumer(db.DB, app, nil)
	return &fixture{db: db.DB, app: app, wakes: &wakes, cons: cons}
}

type outboxRow struct {
	EventID string          `db:"event_id"`
	Type    string          `db:"event_type"`
	Agg     uint64          `db:"aggregate_id"`
	Version uint64          `db:"aggregate_version"`
	Payload json.RawMessage `db:"payload"`
	Status  string          `db:"status"`
}

// selectAll reads the rows of a query, and fails the test if it cannot.
func selectAll[T any](t *testing.T, db *sqlx.DB, q string, args ...any) []T {
	t.Helper()
	var rows []T
	if err := db.Select(&rows, q, args...); err != nil {
		t.Fatal(err)
	}
	return rows
}

// getOne reads the one row of a query, and fails the test if it cannot.
func getOne[T any](t *testing.T, db *sqlx.DB, q string, args ...any) T {
	t.Helper()
	var v T
	if err := db.Get(&v, q, args...); err != nil {
		t.Fatal(err)
	}
	return v
}

func (f *fixture) outbox(t *testing.T) []outboxRow {
	t.Helper()
	return selectAll[outboxRow](t, f.db, `SELECT event_id, event_type, aggregate_id, aggregate_version, payload, status FROM outbox_events ORDER BY aggregate_id, aggregate_version`)
}

func (f *fixture) count(t *testing.T, table string) int {
	t.Helper()
	return getOne[int](t, f.db, "SELECT COUNT(*) FROM "+table)
}

// wantOneOrder checks that one order and one outbox event were written.
func (f *fixture) wantOneOrder(t *testing.T) {
	t.Helper()
	if n, m := f.count(t, "orders"), len(f.outbox(t)); n != 1 || m != 1 {
		t.Fatalf("orders=%d outbox=%d, want 1 and 1", n, m)
	}
}

// create creates an order of twoKeyboards with key, and fails the test if
// it cannot.
func (f *fixture) create(t *testing.T, key string) order.Order {
	t.Helper()
	o, _, err := f.app.Create(context.Background(), key, twoKeyboards)
	if err != nil {
		t.Fatalf("create %q: %v", key, err)
	}
	return o
}

var twoKeyboards = order.Request{CustomerID: "c-1", Lines: []order.Line{{SKU: "SKU-1", Quantity: 2}, {SKU: "SKU-2", Quantity: 1}}}

func TestCreateWritesOrderAndOrderCreatedInOneTransaction(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	o, created, err := f.app.Create(context.Background(), "key-1", twoKeyboards)
	if err != nil || !created {
		t.Fatalf("Create = %v, created=%v", err, created)
	}
	if o.Status != order.PendingInventory || o.TotalCents != 2*8900+1200 || o.Currency != "EUR" || len(o.Items) != 2 {
		t.Fatalf("order = %+v, want pending_inventory, 19000 EUR, 2 items", o)
	}
	rows := f.outbox(t)
	if len(rows) != 1 || rows[0].Type != events.OrderCreated || rows[0].Agg != o.ID || rows[0].Version != 1 || rows[0].Status != "pending" {
		t.Fatalf("outbox = %+v, want one pending order.created v1 for order %d", rows, o.ID)
	}
	p, err := events.Decode[events.OrderCreatedV1](rows[0].Payload)
	if err != nil {
		t.Fatal(err)
	}
	if p.OrderID != o.ID || p.CustomerID != "c-1" || p.TotalCents != 19000 || len(p.Items) != 2 ||
		p.Items[0] != (events.Item{SKU: "SKU-1", Quantity: 2, UnitPriceCents: 8900}) {
		t.Fatalf("payload = %+v", p)
	}
	if f.wakes.Load() != 1 {
		t.Fatalf("dispatcher woken %d times, want 1", f.wakes.Load())
	}
	// The answer is the stored order, server-set times included.
	stored, err := f.app.Get(context.Background(), o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !o.CreatedAt.Equal(stored.CreatedAt) || !o.UpdatedAt.Equal(stored.UpdatedAt) || !o.DeadlineAt.Equal(stored.DeadlineAt) ||
		o.CreatedAt.IsZero() || o.Version != stored.Version || len(stored.Items) != 2 || stored.Items[0] != o.Items[0] {
		t.Fatalf("answer %+v, stored %+v: want the same order and times", o, stored)
	}
}

// The create answers its times without reading them back, yet in database
// time, the clock the deadline sweep compares with NOW(6): created within
// the call as the database saw it, updated when created, the deadline
// exactly the participant deadline later, and stored as answered.
func TestCreateTimesAreDatabaseTime(t *testing.T) {
	t.Parallel()
	f := newDeadlineFixture(t)
	dbNow := func() time.Time { return getOne[time.Time](t, f.db, `SELECT NOW(6)`) }
	before := dbNow()
	o := f.create(t, "k")
	after := dbNow()
	if o.CreatedAt.Before(before) || o.CreatedAt.After(after) {
		t.Errorf("created_at %v, want database time between %v and %v", o.CreatedAt, before, after)
	}
	if !o.UpdatedAt.Equal(o.CreatedAt) {
		t.Errorf("updated_at %v, want created_at %v", o.UpdatedAt, o.CreatedAt)
	}
	if want := o.CreatedAt.Add(testDeadlines.Participant); !o.DeadlineAt.Equal(want) {
		t.Errorf("deadline_at %v, want created_at + %v = %v", o.DeadlineAt, testDeadlines.Participant, want)
	}
	var stored struct {
		Created  time.Time `db:"created_at"`
		Updated  time.Time `db:"updated_at"`
		Deadline time.Time `db:"deadline_at"`
		Changed  time.Time `db:"changed_at"`
	}
	if err := f.db.Get(&stored, `SELECT o.created_at, o.updated_at, o.deadline_at, h.changed_at
FROM orders o JOIN order_history h ON h.order_id = o.id WHERE o.id = ?`, o.ID); err != nil {
		t.Fatal(err)
	}
	if !stored.Created.Equal(o.CreatedAt) || !stored.Updated.Equal(o.UpdatedAt) || !stored.Deadline.Equal(o.DeadlineAt) {
		t.Errorf("stored %+v, answered created %v updated %v deadline %v", stored, o.CreatedAt, o.UpdatedAt, o.DeadlineAt)
	}
	// The timeline shows the order's creation at its first history row:
	// not before the order's own creation time.
	if stored.Changed.Before(stored.Created) {
		t.Errorf("first history row at %v, before the order's created_at %v", stored.Changed, stored.Created)
	}
}

// A retry with an accepted order's key gets that order, not a second one:
// when the same lines come in another order (the same request), and after
// the catalogue stopped selling one of its products (the key, not the price
// list, decides). Another request then fails as it would without the order:
// the same key with another body conflicts, a new key for the unsold
// product is invalid.
func TestCreateReplaysTheSameRequest(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		between  string // SQL run between the create and its retry ("": none)
		retry    order.Request
		otherKey string
		other    order.Request
		otherErr error
	}{
		{"the same request", "",
			order.Request{CustomerID: "c-1", Lines: []order.Line{twoKeyboards.Lines[1], twoKeyboards.Lines[0]}},
			"key-1", order.Request{CustomerID: "c-1", Lines: []order.Line{{SKU: "SKU-1", Quantity: 3}}}, order.ErrIdempotencyConflict},
		{"after the catalogue changed", `DELETE FROM products WHERE sku = 'SKU-2'`,
			twoKeyboards, "key-2", twoKeyboards, order.ErrInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			ctx := context.Background()
			first := f.create(t, "key-1")
			if tt.between != "" {
				if _, err := f.db.Exec(tt.between); err != nil {
					t.Fatal(err)
				}
			}
			again, created, err := f.app.Create(ctx, "key-1", tt.retry)
			if err != nil || created || again.ID != first.ID || again.TotalCents != 19000 {
				t.Fatalf("retry = %+v created %v err %v, want order %d replayed", again, created, err, first.ID)
			}
			if n := len(f.outbox(t)); n != 1 {
				t.Fatalf("outbox rows = %d, want 1 (a replay writes no event)", n)
			}
			if _, _, err := f.app.Create(ctx, tt.otherKey, tt.other); !errors.Is(err, tt.otherErr) {
				t.Fatalf("key %s, other request: err = %v, want %v", tt.otherKey, err, tt.otherErr)
			}
			f.wantOneOrder(t)
		})
	}
}

// Twenty concurrent requests with one key, released together: one order,
// one OrderCreated, and every caller gets that order.
func TestConcurrentCreatesWithOneKeyMakeOneOrder(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n = 20
	ids := make([]uint64, n)
	errs := make([]error, n)
	testutil.Together(n, func(i int) {
		o, _, err := f.app.Create(context.Background(), "same-key", twoKeyboards)
		ids[i], errs[i] = o.ID, err
	})
	for i := range ids {
		if errs[i] != nil || ids[i] != ids[0] || ids[0] == 0 {
			t.Fatalf("caller %d: id %d err %v, want id %d", i, ids[i], errs[i], ids[0])
		}
	}
	f.wantOneOrder(t)
}

// Ten cancels with one key, released together, half of them for another
// order: the first to commit decides. Every caller that asked what it
// asked gets its answer (cancelled, once, the others replayed); the callers
// who reused the key for the other order are refused, and that order is
// untouched. One OrderCancelled, one key row.
func TestConcurrentCancelsWithOneKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	a := f.create(t, "a")
	b := f.create(t, "b")
	const n = 10
	type answer struct {
		order    uint64
		result   orderapp.CancelResult
		replayed bool
		err      error
	}
	answers := make([]answer, n)
	testutil.Together(n, func(i int) {
		id := a.ID
		if i%2 == 1 {
			id = b.ID
		}
		_, res, replayed, err := f.app.Cancel(ctx, "one-key", id, "changed my mind")
		answers[i] = answer{id, res, replayed, err}
	})
	var winner uint64
	for _, ans := range answers {
		if ans.err == nil && !ans.replayed {
			if winner != 0 {
				t.Fatalf("two requests cancelled with one key: %+v", answers)
			}
			winner = ans.order
		}
	}
	if winner == 0 {
		t.Fatalf("no request cancelled: %+v", answers)
	}
	for i, ans := range answers {
		switch {
		case ans.order == winner && (ans.err != nil || ans.result != orderapp.Cancelled):
			t.Errorf("caller %d (order %d): %s %v, want cancelled", i, ans.order, ans.result, ans.err)
		case ans.order != winner && !errors.Is(ans.err, order.ErrIdempotencyConflict):
			t.Errorf("caller %d (order %d, the key's other order): %s %v, want the idempotency conflict", i, ans.order, ans.result, ans.err)
		}
	}
	loser := a.ID + b.ID - winner
	if s := f.status(t, loser).Status; s != order.PendingInventory {
		t.Fatalf("order %d, whose cancels were refused, is %s", loser, s)
	}
	cancels := 0
	for _, r := range f.outbox(t) {
		if r.Type == events.OrderCancelled {
			cancels++
		}
	}
	if keys := f.count(t, "cancel_requests"); cancels != 1 || keys != 1 {
		t.Fatalf("%d order.cancelled events and %d key rows, want 1 and 1", cancels, keys)
	}
}

func TestCreateRefusesBadRequestsAndWritesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	bad := []order.Request{
		{CustomerID: "c-1", Lines: []order.Line{{SKU: "NO-SUCH-SKU", Quantity: 1}}},
		{CustomerID: "c-1"},
		{CustomerID: "c-1", Lines: []order.Line{{SKU: "SKU-1", Quantity: 0}}},
	}
	for i, r := range bad {
		if _, _, err := f.app.Create(context.Background(), "k"+string(rune('a'+i)), r); !errors.Is(err, order.ErrInvalid) {
			t.Errorf("request %d: err = %v, want ErrInvalid", i, err)
		}
	}
	if n, m := f.count(t, "orders"), len(f.outbox(t)); n != 0 || m != 0 {
		t.Fatalf("orders=%d outbox=%d, want nothing written", n, m)
	}
}

func TestCreateFailureAfterOrderInsertLeavesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	fp := failpoint.NewRegistry()
	fp.Error("order.create.after-order-insert", 1)
	ctx := failpoint.WithRegistry(context.Background(), fp)
	if _, _, err := f.app.Create(ctx, "key-1", twoKeyboards); !errors.Is(err, failpoint.ErrInjected) {
		t.Fatalf("err = %v, want the injected fault", err)
	}
	if fp.Hits("order.create.after-order-insert") != 1 {
		t.Fatal("the failpoint was not reached")
	}
	if n, m, k := f.count(t, "orders"), len(f.outbox(t)), f.count(t, "order_items"); n+m+k != 0 {
		t.Fatalf("orders=%d items=%d outbox=%d after the fault, want none", n, k, m)
	}
	// The client's retry with the same key succeeds.
	if _, created, err := f.app.Create(ctx, "key-1", twoKeyboards); err != nil || !created {
		t.Fatalf("retry: created=%v err=%v", created, err)
	}
}

func envelope(t *testing.T, typ string, orderID uint64, payload any) events.Envelope {
	t.Helper()
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return events.Envelope{EventID: uuid.NewString(), Type: typ, AggregateID: orderID, AggregateVersion: 1, SchemaVersion: 1, Payload: b}
}

func (f *fixture) deliver(t *testing.T, e events.Envelope) {
	t.Helper()
	if err := f.cons.Process(context.Background(), e); err != nil {
		t.Fatalf("process %s: %v", e.Type, err)
	}
}

func reserved(t *testing.T, o order.Order) events.Envelope {
	return envelope(t, events.InventoryReserved, o.ID, events.InventoryReservedV1{OrderID: o.ID, CustomerID: o.CustomerID,
		Items: []events.Item{{SKU: "SKU-1", Quantity: 2, UnitPriceCents: 8900}}, AmountCents: o.TotalCents, Currency: "EUR"})
}

func (f *fixture) status(t *testing.T, id uint64) order.Order {
	t.Helper()
	o, err := f.app.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// The participants' results drive an order to its end. Each case delivers
// its results in turn, each leaving the order in a status, and ends with
// the order's reason and its outbox ("type vN", in version order). Results
// that do not fit the state (anything after a terminal state) change
// nothing.
func TestResultsDriveTheOrder(t *testing.T) {
	t.Parallel()
	type step struct {
		event func(t *testing.T, o order.Order) events.Envelope
		want  order.Status
	}
	paid := func(t *testing.T, o order.Order) events.Envelope {
		return envelope(t, events.PaymentSucceeded, o.ID, events.PaymentSucceededV1{OrderID: o.ID, AmountCents: o.TotalCents,
			Currency: "EUR", ChargeID: "ch_1"})
	}
	declined := func(t *testing.T, o order.Order) events.Envelope {
		return envelope(t, events.PaymentFailed, o.ID, events.PaymentFailedV1{OrderID: o.ID, Reason: "card_declined"})
	}
	outOfStock := func(t *testing.T, o order.Order) events.Envelope {
		return envelope(t, events.InventoryRejected, o.ID, events.InventoryRejectedV1{OrderID: o.ID, Reason: "insufficient stock"})
	}
	for _, tt := range []struct {
		name   string
		steps  []step
		reason string
		outbox string
	}{
		{"reserved, then paid: confirmed", []step{{reserved, order.AwaitingPayment}, {paid, order.Confirmed}},
			"", "[order.created v1 order.confirmed v2]"},
		{"reserved, then declined: cancelled, the stock to be released", []step{{reserved, order.AwaitingPayment}, {declined, order.Cancelled}},
			"payment failed: card_declined", "[order.created v1 order.cancelled v2]"},
		{"rejected: nothing to compensate", []step{{outOfStock, order.Rejected}},
			"insufficient stock", "[order.created v1]"},
		{"stale results after a terminal state", []step{{outOfStock, order.Rejected}, {reserved, order.Rejected}, {paid, order.Rejected}},
			"insufficient stock", "[order.created v1]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			o := f.create(t, "k")
			for i, st := range tt.steps {
				e := st.event(t, o)
				f.deliver(t, e)
				if s := f.status(t, o.ID).Status; s != st.want {
					t.Fatalf("after result %d (%s): %s, want %s", i+1, e.Type, s, st.want)
				}
			}
			if got := f.status(t, o.ID).StatusReason; tt.reason != "" && got != tt.reason {
				t.Errorf("status reason %q, want %q", got, tt.reason)
			}
			var outbox []string
			for _, r := range f.outbox(t) {
				outbox = append(outbox, fmt.Sprintf("%s v%d", r.Type, r.Version))
			}
			if got := fmt.Sprint(outbox); got != tt.outbox {
				t.Errorf("outbox %s, want %s", got, tt.outbox)
			}
		})
	}
}

// A payment result can overtake the InventoryReserved that caused it (they
// come from different services). The order tolerates it: the payment
// implies the reservation, so it confirms, and the late reservation finds a
// later state and changes nothing.
func TestPaymentOvertakingTheReservationConfirms(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	o := f.create(t, "k")
	f.deliver(t, envelope(t, events.PaymentSucceeded, o.ID, events.PaymentSucceededV1{OrderID: o.ID, AmountCents: o.TotalCents}))
	if s := f.status(t, o.ID).Status; s != order.Confirmed {
		t.Fatalf("payment.succeeded before inventory.reserved: %s, want confirmed", s)
	}
	f.deliver(t, reserved(t, o))
	if s := f.status(t, o.ID).Status; s != order.Confirmed {
		t.Fatalf("the late inventory.reserved moved the order to %s", s)
	}
	rows := f.outbox(t)
	if len(rows) != 2 || rows[1].Type != events.OrderConfirmed {
		t.Fatalf("outbox = %+v, want order.created and one order.confirmed", rows)
	}
}

func TestResultForUnknownOrderIsPermanent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	err := f.cons.Process(context.Background(), envelope(t, events.InventoryRejected, 999, events.InventoryRejectedV1{OrderID: 999}))
	if err == nil || errors.Is(err, inbox.ErrAlreadyProcessed) {
		t.Fatalf("err = %v, want a permanent error", err)
	}
	if n := f.count(t, "consumer_inbox"); n != 0 {
		t.Fatalf("inbox rows = %d, want 0", n)
	}
}

func TestCancelInEveryState(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()

	// pending_inventory: cancelled, OrderCancelled v2, nothing to refund.
	o := f.create(t, "k1")
	got, res, _, err := f.app.Cancel(ctx, "cancel-1", o.ID, "changed my mind")
	if err != nil || res != orderapp.Cancelled || got.Status != order.Cancelled || got.RefundStatus != order.RefundNone {
		t.Fatalf("cancel pending: %+v %s %v", got, res, err)
	}
	// Again: an idempotent no-op with a clear answer, no new event.
	if _, res, _, err := f.app.Cancel(ctx, "cancel-2", o.ID, "again"); err != nil || res != orderapp.AlreadyCancelled {
		t.Fatalf("second cancel: %s %v, want already_cancelled", res, err)
	}
	// A late reservation does not resurrect it.
	f.deliver(t, reserved(t, o))
	if s := f.status(t, o.ID).Status; s != order.Cancelled {
		t.Fatalf("late inventory.reserved moved a cancelled order to %s", s)
	}

	// confirmed: cancelled with a refund pending (a new business transaction).
	c := f.create(t, "k2")
	f.deliver(t, reserved(t, c))
	f.deliver(t, envelope(t, events.PaymentSucceeded, c.ID, events.PaymentSucceededV1{OrderID: c.ID, AmountCents: c.TotalCents}))
	got, res, _, err = f.app.Cancel(ctx, "cancel-3", c.ID, "returned")
	if err != nil || res != orderapp.Cancelled || got.Status != order.Cancelled || got.RefundStatus != order.RefundPending {
		t.Fatalf("cancel confirmed: %+v %s %v, want cancelled with refund pending", got, res, err)
	}
	f.deliver(t, envelope(t, events.PaymentRefunded, c.ID, events.PaymentRefundedV1{OrderID: c.ID, AmountCents: c.TotalCents, RefundID: "re_1"}))
	if got := f.status(t, c.ID); got.RefundStatus != order.RefundRefunded || got.Status != order.Cancelled {
		t.Fatalf("after the refund: %s/%s, want cancelled/refunded", got.Status, got.RefundStatus)
	}

	// awaiting_payment, then the payment succeeds after the cancel: the
	// order stays cancelled and its money is owed back.
	p := f.create(t, "k3")
	f.deliver(t, reserved(t, p))
	if _, res, _, err := f.app.Cancel(ctx, "cancel-4", p.ID, "too slow"); err != nil || res != orderapp.Cancelled {
		t.Fatalf("cancel awaiting_payment: %s %v", res, err)
	}
	f.deliver(t, envelope(t, events.PaymentSucceeded, p.ID, events.PaymentSucceededV1{OrderID: p.ID, AmountCents: p.TotalCents}))
	if got := f.status(t, p.ID); got.Status != order.Cancelled || got.RefundStatus != order.RefundPending {
		t.Fatalf("late payment: %s/%s, want cancelled/pending", got.Status, got.RefundStatus)
	}

	var cancels []uint64
	for _, r := range f.outbox(t) {
		if r.Type != events.OrderCancelled {
			continue
		}
		cancels = append(cancels, r.Agg)
		// Only the cancel of the confirmed order says a sale happened:
		// inventory restocks it even if this event overtakes the confirm.
		p, err := events.Decode[events.OrderCancelledV1](r.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if want := r.Agg == c.ID; p.AfterConfirm != want {
			t.Errorf("OrderCancelled of order %d: after_confirm %v, want %v", r.Agg, p.AfterConfirm, want)
		}
	}
	if len(cancels) != 3 {
		t.Fatalf("OrderCancelled events for orders %v, want one for each of the three", cancels)
	}

	// rejected: an idempotent no-op.
	r := f.create(t, "k4")
	f.deliver(t, envelope(t, events.InventoryRejected, r.ID, events.InventoryRejectedV1{OrderID: r.ID, Reason: "short"}))
	if _, res, _, err := f.app.Cancel(ctx, "cancel-5", r.ID, "x"); err != nil || res != orderapp.AlreadyRejected {
		t.Fatalf("cancel rejected: %s %v, want already_rejected", res, err)
	}
	if _, _, _, err := f.app.Cancel(ctx, "cancel-6", 9999, "x"); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("cancel unknown: %v, want ErrNotFound", err)
	}
}

// Late payment after the reservation expired and the stock was sold: the
// confirmed order is cancelled with its refund pending.
func TestCommitFailureCancelsAndRefunds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	o := f.create(t, "k")
	f.deliver(t, reserved(t, o))
	f.deliver(t, envelope(t, events.InventoryReservationExpired, o.ID, events.InventoryReservationExpiredV1{OrderID: o.ID, Reason: "lease"}))
	if s := f.status(t, o.ID).Status; s != order.AwaitingPayment {
		t.Fatalf("expiry moved the order to %s; it should wait for the payment", s)
	}
	f.deliver(t, envelope(t, events.PaymentSucceeded, o.ID, events.PaymentSucceededV1{OrderID: o.ID, AmountCents: o.TotalCents}))
	f.deliver(t, envelope(t, events.InventoryCommitFailed, o.ID, events.InventoryCommitFailedV1{OrderID: o.ID, Reason: "SKU-1 gone"}))
	got := f.status(t, o.ID)
	if got.Status != order.Cancelled || got.RefundStatus != order.RefundPending {
		t.Fatalf("order = %s/%s, want cancelled with a refund pending", got.Status, got.RefundStatus)
	}
	rows := f.outbox(t)
	if last := rows[len(rows)-1]; last.Type != events.OrderCancelled || last.Version != 3 {
		t.Fatalf("last event = %s v%d, want order.cancelled v3", last.Type, last.Version)
	}
}

// consumer is the order service's consumer as the service runs it: the
// chapter's (pkg/inbox) and its batch layer (HandleBatch).
type consumer struct {
	*inbox.Consumer
	batch *batch.Consumer[orderapp.Store]
}

func (c consumer) HandleBatch(ctx context.Context, ds []rabbit.Delivery) []rabbit.Decision {
	return c.batch.HandleBatch(ctx, ds)
}

// newConsumer makes the order service's consumer on db, its metrics on reg
// (nil: none).
func newConsumer(db *sqlx.DB, app *orderapp.App, reg *prometheus.Registry) consumer {
	cfg := inbox.Config{Name: orderbindings.ConsumerName, DB: db, Log: quiet}
	opt := batch.Options{}
	if reg != nil {
		cfg.Metrics, opt.Metrics = inbox.NewMetrics(reg), batch.NewMetrics(reg)
	}
	c, b := batch.New(cfg, orderbindings.Handlers(app), opt)
	return consumer{Consumer: c, batch: b}
}
