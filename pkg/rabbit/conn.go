// Package rabbit is the broker side of the system: one connection per
// process that recovers after a broker restart or the loss of a cluster
// node (reconnect with backoff to the next address of its list, redeclare
// the topology), a publisher that waits for publisher confirms and treats a
// mandatory return as a failure, and a consume loop with manual acks,
// bounded prefetch and delayed retries, which outlives a panicking handler.
package rabbit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/pkg/base/retry"
)

// Conn owns one AMQP connection and replaces it when it is lost. Publishers
// and consumers ask it for channels; after a reconnect they ask again.
//
// It knows one or several addresses (the nodes of a cluster): it connects
// to the first that answers and, when that connection is lost, tries the
// next one first (see failover). amqp091-go's own recovery
// (amqp.Config.Recovery, off here) redials the one URL it was given and
// gives up after a few tries; this loop tries every address, forever, and
// redeclares the whole topology on whichever node it reaches.
type Conn struct {
	addrs []string // AMQP URLs, in the order of AMQP_URL
	topo  Topology
	log   *slog.Logger

	mu    sync.Mutex
	conn  *amqp.Connection
	addr  string        // the address conn is connected to
	ready chan struct{} // closed while conn is usable; replaced when it is lost
}

// New returns a Conn that is not connected yet: Run connects it. urls is
// one AMQP URL or a comma-separated list of them (the nodes of a cluster);
// ParseURLs checks it.
func New(urls string, topo Topology, log *slog.Logger) *Conn {
	return &Conn{addrs: SplitURLs(urls), topo: topo, log: log, ready: make(chan struct{})}
}

// SplitURLs splits a comma-separated list of AMQP URLs (blanks around the
// commas ignored).
func SplitURLs(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// ParseURLs splits a comma-separated list of AMQP URLs and reports every
// bad one at once, by its position and host (never its password).
func ParseURLs(s string) ([]string, error) {
	urls := SplitURLs(s)
	if len(urls) == 0 {
		return nil, errors.New("no address: want amqp://user:password@host:port/vhost, or several separated by commas")
	}
	var errs []error
	for i, u := range urls {
		// url.Parse's own error quotes the whole URL, password included:
		// only its verdict is kept.
		if _, err := url.Parse(u); err != nil {
			errs = append(errs, fmt.Errorf("address %d: not a URL", i+1))
			continue
		}
		if _, err := amqp.ParseURI(u); err != nil {
			errs = append(errs, fmt.Errorf("address %d (%s): %w", i+1, hostOf(u), err))
		}
	}
	return urls, errors.Join(errs...)
}

// failover is the order in which Run dials the addresses: a round tries
// each one once, starting with the address after the one whose connection
// was lost last (the first address at the start), wrapping around. The
// node that just dropped us is tried last: it is the one most likely down.
type failover struct{ n, start int }

// round returns the indexes of one round of dials, in order.
func (f failover) round() []int {
	out := make([]int, f.n)
	for k := range out {
		out[k] = (f.start + k) % f.n
	}
	return out
}

// lost records that the connection to address i was lost.
func (f *failover) lost(i int) { f.start = (i + 1) % f.n }

// Run keeps the connection up until ctx ends: dial the addresses in the
// failover order until one answers and takes the topology, wait for that
// connection to close, move on to the next address; after a round in
// which none answered, wait (capped exponential backoff) and start another.
// On return the connection is closed.
//
// Publishes whose confirms were pending when a connection was lost end
// with ErrNacked (the client closes their confirmations as not acked):
// the caller re-sends them with the same message id, on the next node.
func (c *Conn) Run(ctx context.Context) error {
	if len(c.addrs) == 0 {
		return errors.New("rabbit: no broker address")
	}
	backoff := retry.Backoff{Base: 200 * time.Millisecond, Cap: 10 * time.Second}
	order := failover{n: len(c.addrs)}
	rounds := 0
	for {
		conn, i, err := c.connectRound(ctx, order.round())
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			rounds++
			wait := backoff.Delay(rounds)
			c.log.Warn("broker connect failed", "err", err, "retry_in", wait.Round(time.Millisecond), "rounds", rounds)
			if !retry.Wait(ctx, wait) {
				return nil
			}
			continue
		}
		rounds = 0
		closed := conn.NotifyClose(make(chan *amqp.Error, 1))
		c.mu.Lock()
		c.conn, c.addr = conn, c.addrs[i]
		close(c.ready)
		c.mu.Unlock()
		c.log.Info("broker connected", "address", hostOf(c.addrs[i]))

		select {
		case <-ctx.Done():
			c.markDown(conn)
			_ = conn.Close()
			return nil
		case e := <-closed:
			c.markDown(conn)
			order.lost(i)
			c.log.Warn("broker connection lost", "address", hostOf(c.addrs[i]), "err", e)
		}
	}
}

// connectRound dials the addresses of one round in order and returns the
// first connection that took the topology, with its address's index; the
// error lists why each address failed.
func (c *Conn) connectRound(ctx context.Context, round []int) (*amqp.Connection, int, error) {
	var errs []error
	for _, i := range round {
		conn, err := c.connect(ctx, c.addrs[i])
		if err == nil {
			return conn, i, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", hostOf(c.addrs[i]), err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, -1, errors.Join(errs...)
}

// hostOf is an address as logs show it: host and port, no credentials.
func hostOf(addr string) string {
	if u, err := url.Parse(addr); err == nil && u.Host != "" {
		return u.Host
	}
	return "(unparsable address)"
}

// markDown records that conn is lost, if it is still the current
// connection. A caller may hold an older one (Channel read it just before
// a failover): marking that down would clear the connection Run has put in
// its place and leave everything waiting for a reconnect that never comes.
func (c *Conn) markDown(conn *amqp.Connection) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != conn {
		return
	}
	c.conn, c.addr = nil, ""
	select {
	case <-c.ready:
		c.ready = make(chan struct{})
	default:
	}
}

func (c *Conn) connect(ctx context.Context, addr string) (*amqp.Connection, error) {
	conn, err := amqp.DialConfig(addr, amqp.Config{
		Heartbeat: 10 * time.Second,
		Locale:    "en_US",
		Dial:      amqp.DefaultDial(5 * time.Second),
		// Shown in the management UI and rabbitmqctl list_connections.
		Properties: amqp.Table{"connection_name": fmt.Sprintf("%s pid %d (%s)", filepath.Base(os.Args[0]), os.Getpid(), c.topo.Exchange)},
	})
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	earlier, err := c.topo.declare(conn)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("declare topology: %w", err)
	}
	for _, q := range earlier {
		c.log.Warn("queue declared by an earlier version: its dead-lettering stays at-most-once until an operator sets the policy of docs/operations.md (Upgrading the queues)",
			"queue", q)
	}
	return conn, nil
}

// ErrNotConnected is returned by TryChannel while the broker is unreachable.
var ErrNotConnected = errors.New("broker not connected")

// Channel opens a new channel, waiting for a live connection until ctx ends.
func (c *Conn) Channel(ctx context.Context) (*amqp.Channel, error) {
	for {
		c.mu.Lock()
		conn, ready := c.conn, c.ready
		c.mu.Unlock()
		if conn != nil {
			ch, err := c.channelOn(conn)
			if errors.Is(err, errLost) {
				continue // wait for Run to replace it
			}
			return ch, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("open channel: %w (%w)", ErrNotConnected, ctx.Err())
		case <-ready:
		}
	}
}

// errLost: the connection a channel was asked of has closed.
var errLost = errors.New("connection lost")

// channelOn opens a channel on conn. A conn that has closed is marked
// down (only if it is still the current one), and errLost returned.
func (c *Conn) channelOn(conn *amqp.Connection) (*amqp.Channel, error) {
	ch, err := conn.Channel()
	if err == nil {
		return ch, nil
	}
	if !errors.Is(err, amqp.ErrClosed) {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	c.markDown(conn)
	return nil, errLost
}

// Connected reports whether the connection is up (for /readyz).
func (c *Conn) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn != nil && !c.conn.IsClosed()
}

// Address is the host and port of the node the connection is up to now
// ("" while it is down).
func (c *Conn) Address() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return ""
	}
	return hostOf(c.addr)
}

// WaitConnected blocks until the connection is up or ctx ends.
func (c *Conn) WaitConnected(ctx context.Context) error {
	c.mu.Lock()
	ready := c.ready
	c.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrNotConnected, ctx.Err())
	}
}
