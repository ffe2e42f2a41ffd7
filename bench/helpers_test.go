package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/internal/benchtest"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

var quiet = slog.New(slog.DiscardHandler)

// fixture is a fresh database of one service's schema and a broker
// namespace with one durable quorum queue, "bench.events", bound to the
// given routing keys: the queue type every saga queue has.
type fixture struct {
	db    *sqldbtest.DB
	ns    rabbit.Namespace
	conn  *rabbit.Conn
	queue string
}

func newFixture(b *testing.B, service string, keys ...string) *fixture {
	b.Helper()
	f := &fixture{db: sqldbtest.New(b, service), ns: rabbittest.Namespace(b)}
	topo := rabbittest.Topology(b, f.ns, rabbit.Queue{Name: "bench.events", Keys: keys, DeliveryLimit: 20})
	f.conn = rabbittest.Conn(b, topo)
	f.queue = topo.Queues[0].Name
	return f
}

// purge empties the queue so the next phase publishes into an empty one.
func (f *fixture) purge(b *testing.B) { benchtest.Purge(b, f.queue) }

// queueDepth is the number of ready messages in the queue.
func (f *fixture) queueDepth(b *testing.B) int { return benchtest.QueueDepth(b, f.queue) }

func countStatus(b *testing.B, db *sqlx.DB, status string) int {
	b.Helper()
	var n int
	if err := db.Get(&n, `SELECT COUNT(*) FROM outbox_events WHERE status = ?`, status); err != nil {
		b.Fatal(err)
	}
	return n
}

// messages builds n messages exactly as the dispatcher does for
// OrderCreated events (rabbit.FromEnvelope: persistent, mandatory, the
// contract's headers), with fresh event ids.
func messages(exchange string, n int) []rabbit.Message {
	out := make([]rabbit.Message, n)
	for i := range out {
		out[i] = rabbit.FromEnvelope(exchange, benchtest.Envelope(uint64(i+1)))
	}
	return out
}

// publishAll publishes msgs with `publishers` rabbit.Publishers in
// parallel, each sending its share in batches of batch (all published,
// then all confirms awaited: the pipelining rabbit.Publisher does), and
// returns how long it took. Every message must be confirmed.
func publishAll(b *testing.B, conn *rabbit.Conn, msgs []rabbit.Message, publishers, batch int) time.Duration {
	b.Helper()
	pubs := make([]*rabbit.Publisher, publishers)
	for i := range pubs {
		pubs[i] = conn.NewPublisher() // opens its channel on first use, as a dispatcher's does
	}
	defer func() {
		for _, p := range pubs {
			p.Close()
		}
	}()
	return benchtest.InParallel(b, "raw publish", publishers, func(w int) error {
		for i := w * batch; i < len(msgs); i += publishers * batch {
			part := msgs[i:min(i+batch, len(msgs))]
			for j, err := range pubs[w].Publish(context.Background(), part, 30*time.Second) {
				if err != nil {
					return fmt.Errorf("message %d: %w", i+j, err)
				}
			}
		}
		return nil
	})
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	r := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(r, 1), len(sorted))-1]
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// reportLatency reports p50/p90/p99/max of ds with a metric prefix.
func reportLatency(b *testing.B, prefix string, ds []time.Duration) {
	slices.Sort(ds)
	b.ReportMetric(msf(percentile(ds, 50)), prefix+"p50_ms")
	b.ReportMetric(msf(percentile(ds, 90)), prefix+"p90_ms")
	b.ReportMetric(msf(percentile(ds, 99)), prefix+"p99_ms")
	b.ReportMetric(msf(percentile(ds, 100)), prefix+"max_ms")
}

// sqlCounter is a TCP proxy in front of the MySQL server that counts the
// commands clients send, by kind. Counting on the wire isolates exactly
// the connections under test on a server other tests share (the server's
// own counters are global, and performance_schema is off here), and needs
// no change to the code under test: only its DSN points here. With
// interpolateParams=true every statement, BEGIN and COMMIT included, is one
// COM_QUERY packet.
type sqlCounter struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	counts map[string]int // "SELECT", "UPDATE", "COMMIT", "PING", ...
}

func newSQLCounter(b *testing.B) *sqlCounter {
	b.Helper()
	mc, err := mysql.ParseDSN(sqldbtest.ServerDSN())
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	c := &sqlCounter{ln: ln, target: mc.Addr, counts: map[string]int{}}
	go c.serve()
	b.Cleanup(func() { ln.Close() })
	return c
}

// dsn rewrites a DSN to go through the counter (TLS off: the proxy reads
// the packets).
func (c *sqlCounter) dsn(b *testing.B, dsn string) string {
	b.Helper()
	mc, err := mysql.ParseDSN(dsn)
	if err != nil {
		b.Fatal(err)
	}
	mc.Addr = c.ln.Addr().String()
	mc.TLSConfig = "false"
	return mc.FormatDSN()
}

func (c *sqlCounter) serve() {
	for {
		client, err := c.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer client.Close()
			server, err := net.Dial("tcp", c.target)
			if err != nil {
				return
			}
			defer server.Close()
			go func() { _, _ = io.Copy(client, server); client.Close() }()
			c.pump(client, server)
		}()
	}
}

// pump copies client packets to the server, counting commands: a packet
// with sequence id 0 starts a command, its first byte is the command.
func (c *sqlCounter) pump(client, server net.Conn) {
	hdr := make([]byte, 4)
	var buf []byte
	for {
		if _, err := io.ReadFull(client, hdr); err != nil {
			return
		}
		n := int(binary.LittleEndian.Uint32(append(hdr[:3:3], 0)))
		buf = slices.Grow(buf[:0], n)[:n]
		if _, err := io.ReadFull(client, buf); err != nil {
			return
		}
		if hdr[3] == 0 && n > 0 {
			c.count(buf)
		}
		if _, err := server.Write(append(hdr, buf...)); err != nil {
			return
		}
	}
}

func (c *sqlCounter) count(p []byte) {
	kind := fmt.Sprintf("cmd_%#x", p[0])
	switch p[0] {
	case 0x01:
		kind = "QUIT"
	case 0x03: // COM_QUERY
		q := strings.TrimLeft(string(p[1:min(len(p), 64)]), " \t\r\n(")
		word, _, _ := strings.Cut(q, " ")
		kind = strings.ToUpper(strings.TrimRight(word, ";\n"))
	case 0x0e:
		kind = "PING"
	case 0x16:
		kind = "PREPARE"
	case 0x17:
		kind = "EXECUTE"
	case 0x19:
		kind = "CLOSE_STMT"
	}
	c.mu.Lock()
	c.counts[kind]++
	c.mu.Unlock()
}

// snapshot returns the counts so far.
func (c *sqlCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// diff is after - before, and the total of the statements (QUIT excluded).
func diff(before, after map[string]int) (map[string]int, int) {
	out := map[string]int{}
	total := 0
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
			if k != "QUIT" {
				total += d
			}
		}
	}
	return out, total
}
