package inboxtest

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/outbox"
)

// Producer is a service's outbox on a database of its own (the order
// schema), dispatched by hand to the broker's exchange: the producing end
// of a test that follows an event from an outbox row to a consumer's
// inbox.
type Producer struct {
	DB  *sqlx.DB
	d   *outbox.Dispatcher
	pub outbox.Publisher
}

// Producer makes a producer publishing to b's exchange, until the test
// ends.
func (b *Broker) Producer(t testing.TB) *Producer {
	t.Helper()
	p := &Producer{DB: sqldbtest.New(t, "order").DB}
	p.d = outbox.New(p.DB, outbox.Config{Exchange: b.NS.Exchange(), Log: slog.New(slog.DiscardHandler),
		NewPublisher: func() outbox.Publisher { return b.Conn.NewPublisher() }})
	pub := b.Conn.NewPublisher()
	t.Cleanup(pub.Close)
	p.pub = pub
	return p
}

// Add commits e to the outbox in a transaction of its own and returns its
// event id.
func (p *Producer) Add(t testing.TB, e outbox.Event) string {
	t.Helper()
	var ids []string
	if err := sqldb.WithTx(context.Background(), p.DB, func(tx *sqlx.Tx) error {
		var err error
		ids, err = outbox.Add(context.Background(), tx, e)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return ids[0]
}

// Dispatch runs one dispatch round and fails the test unless it sent want
// events.
func (p *Producer) Dispatch(t testing.TB, want int) {
	t.Helper()
	if res, err := p.d.DispatchOnce(context.Background(), p.pub); err != nil || res.Sent != want {
		t.Fatalf("dispatch = %+v, %v; want %d sent", res, err, want)
	}
}
