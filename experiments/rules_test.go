package experiments

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// Rules of the chapter that no experiment of the lab shows, each on the
// real database (docs/course-map.md, "Four more rules"); the fourth, a
// correction gets a new event ID, is in correction_test.go.

// 去重解决不了乱序: "自增事件 ID 不等于事务提交顺序". An id is handed out
// when a row is written, a transaction becomes visible when it commits, and
// the two orders differ. Two transactions write an event each, the later
// id commits first: a reader that follows the ids (the highest id it has
// read, then "WHERE id > ?") reads the later row, moves past the earlier
// one while it is still uncommitted, and never comes back for it. The
// outbox's claim asks for the rows that are still 'pending' instead, and
// finds both.
func TestCommitOrderIsNotIDOrder(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	ctx := context.Background()

	t.Run("auto-increment id", func(t *testing.T) { readerByAutoIncrementID(t, ctx, db) })
	t.Run("the outbox's claim", func(t *testing.T) { outboxClaimByStatus(t, ctx, db) })
}

// 多个 dispatcher 怎么认领: SKIP LOCKED "不能用来获取完整一致的业务查询结果".
// While a dispatcher holds a claim, a query with SKIP LOCKED does not see
// the claimed row: right for a claim (two dispatchers never take the same
// row), wrong for a question about the business (how many orders wait?),
// which a plain read answers in full.
func TestSkipLockedIsNotACompleteQuery(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	ctx := context.Background()
	err := sqldb.WithTx(ctx, db.DB, func(tx *sqlx.Tx) error {
		_, err := outbox.Add(ctx, tx,
			outbox.Event{AggregateID: 1, AggregateVersion: 1, Type: events.OrderCreated, Payload: map[string]any{}},
			outbox.Event{AggregateID: 2, AggregateVersion: 1, Type: events.OrderCreated, Payload: map[string]any{}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	const pendingSkipLocked = `SELECT COUNT(*) FROM (SELECT event_id FROM outbox_events WHERE status = 'pending' FOR UPDATE SKIP LOCKED) AS t`
	const pending = `SELECT COUNT(*) FROM outbox_events WHERE status = 'pending'`
	// A dispatcher in the middle of its claim holds one row locked.
	holder := begin(t, db)
	var held string
	if err := holder.GetContext(ctx, &held, `SELECT event_id FROM outbox_events WHERE aggregate_id = 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	reader := begin(t, db)
	var skipping, full int
	if err := reader.GetContext(ctx, &skipping, pendingSkipLocked); err != nil {
		t.Fatal(err)
	}
	if err := db.GetContext(ctx, &full, pending); err != nil {
		t.Fatal(err)
	}
	_ = reader.Rollback()
	_ = holder.Rollback()
	if skipping != 1 || full != 2 {
		t.Fatalf("pending events: %d with SKIP LOCKED, %d with a plain read; want 1 (the locked row skipped) and 2", skipping, full)
	}
	t.Logf("two events wait; with one row locked a SKIP LOCKED query counts %d, a plain read %d", skipping, full)
}

// 本地故障实验：先定义断言: "数据库提交断点要真的提交，不能被测试框架的外层事
// 务掩盖". Some test frameworks wrap each test in a transaction and roll it
// back at the end; the code's own "commit" inside it is then only a
// savepoint, which no other connection sees, and which vanishes with the
// rollback. A crash right after that commit would prove nothing. The
// project's tests give each test its own database instead
// (sqldbtest.New), and sqldb.WithTx really commits: another connection, as
// another service or a restarted process would, sees the row.
func TestACommitInATestReallyCommits(t *testing.T) {
	t.Parallel()
	db := sqldbtest.New(t, "order")
	ctx := context.Background()
	db.MustExec(`CREATE TABLE marks (name VARCHAR(20) PRIMARY KEY)`)
	pool, err := sqldb.Open(ctx, sqldb.Config{DSN: db.DSN}) // another pool: another process
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	other := func(name string) bool {
		var n int
		if err := pool.GetContext(ctx, &n, `SELECT COUNT(*) FROM marks WHERE name = ?`, name); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	// The framework's way: an outer transaction; the code's commit is a
	// savepoint released inside it.
	outer := begin(t, db)
	for _, q := range []string{`SAVEPOINT code_tx`, `INSERT INTO marks VALUES ('in-outer-tx')`, `RELEASE SAVEPOINT code_tx`} {
		if _, err := outer.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	seenInside := other("in-outer-tx")
	_ = outer.Rollback() // the framework's clean-up
	if seenInside || other("in-outer-tx") {
		t.Fatalf("the row committed inside the outer transaction was seen by another connection")
	}

	// The project's way: its own database, a real COMMIT.
	if err := sqldb.WithTx(ctx, db.DB, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO marks VALUES ('committed')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !other("committed") {
		t.Fatalf("a row WithTx committed is not seen by another connection")
	}
	t.Log("the outer transaction's \"commit\" was seen by no other connection and rolled away; WithTx's commit was seen at once")
}

func begin(t *testing.T, db *sqldbtest.DB) *sqlx.Tx {
	t.Helper()
	tx, err := db.BeginTxx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

func commit(t *testing.T, tx *sqlx.Tx) {
	t.Helper()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// cursorReader is a reader that follows ids: each call runs query (its
// one parameter the highest id read so far, "WHERE id > ? ORDER BY id")
// and returns the ids it had not read yet.
func cursorReader[ID any](t *testing.T, ctx context.Context, db *sqldbtest.DB, query string) func() []ID {
	var cursor ID
	return func() []ID {
		var ids []ID
		if err := db.SelectContext(ctx, &ids, query, cursor); err != nil {
			t.Fatal(err)
		}
		if len(ids) > 0 {
			cursor = ids[len(ids)-1]
		}
		return ids
	}
}

// recorder is an outbox.Publisher that confirms every message and records
// its message id (the event_id).
type recorder struct {
	mu   sync.Mutex
	sent []string
}

func (r *recorder) Publish(_ context.Context, msgs []rabbit.Message, _ time.Duration) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		r.sent = append(r.sent, m.Publishing.MessageId)
	}
	return make([]error, len(msgs))
}

func (r *recorder) Close() {}

func (r *recorder) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sent)
}

// readerByAutoIncrementID: a reader that follows an auto-increment id
// moves past a row that commits after a larger id and never reads it.
func readerByAutoIncrementID(t *testing.T, ctx context.Context, db *sqldbtest.DB) {
	db.MustExec(`CREATE TABLE numbered_events (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, name VARCHAR(20) NOT NULL)`)
	insert := func(tx *sqlx.Tx, name string) uint64 {
		res, err := tx.ExecContext(ctx, `INSERT INTO numbered_events (name) VALUES (?)`, name)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := res.LastInsertId()
		return uint64(id)
	}
	early, late := begin(t, db), begin(t, db)
	idEarly := insert(early, "early") // takes the smaller id
	idLate := insert(late, "late")
	commit(t, late) // the larger id commits first
	read := cursorReader[uint64](t, ctx, db, `SELECT id FROM numbered_events WHERE id > ? ORDER BY id`)
	first := read()
	commit(t, early)
	second := read()
	if !slices.Equal(first, []uint64{idLate}) || len(second) != 0 || idEarly >= idLate {
		t.Fatalf("reader by id read %v, then %v (ids: early %d, late %d); want the late row only, then nothing",
			first, second, idEarly, idLate)
	}
	var all []uint64
	if err := db.SelectContext(ctx, &all, `SELECT id FROM numbered_events ORDER BY id`); err != nil {
		t.Fatal(err)
	}
	t.Logf("ids %v committed; the reader by id read %v and then %v: row %d, committed late, is never read", all, first, second, idEarly)

}

// outboxClaimByStatus: a reader that follows event_id misses the event
// that committed late; the dispatcher's claim, by status, publishes both.
func outboxClaimByStatus(t *testing.T, ctx context.Context, db *sqldbtest.DB) {
	add := func(tx *sqlx.Tx, agg uint64) string {
		ids, err := outbox.Add(ctx, tx, outbox.Event{AggregateID: agg, AggregateVersion: 1, Type: events.OrderCreated, Payload: map[string]any{}})
		if err != nil {
			t.Fatal(err)
		}
		return ids[0]
	}
	early, late := begin(t, db), begin(t, db)
	idEarly := add(early, 1) // event ids are UUIDv7: made in time order, at the write
	time.Sleep(2 * time.Millisecond)
	idLate := add(late, 2)
	commit(t, late)
	// A reader that follows event_id (the wrong way, for contrast) ...
	readByID := cursorReader[string](t, ctx, db, `SELECT event_id FROM outbox_events WHERE event_id > ? ORDER BY event_id`)
	byID := readByID()
	// ... and the dispatcher's claim, by status.
	pub := &recorder{}
	d := outbox.New(db.DB, outbox.Config{Exchange: "saga.events"})
	if _, err := d.DispatchOnce(ctx, pub); err != nil {
		t.Fatal(err)
	}
	commit(t, early)
	byID = append(byID, readByID()...)
	if _, err := d.DispatchOnce(ctx, pub); err != nil {
		t.Fatal(err)
	}
	if idEarly >= idLate || !slices.Equal(byID, []string{idLate}) {
		t.Fatalf("the reader by event_id read %v; want only %s (early %s committed late)", byID, idLate, idEarly)
	}
	if got := pub.ids(); !slices.Equal(got, []string{idLate, idEarly}) {
		t.Fatalf("the claim published %v; want %s, then %s once it committed", got, idLate, idEarly)
	}
	t.Logf("the reader by event_id read %v; the claim by status published %v", byID, pub.ids())

}
