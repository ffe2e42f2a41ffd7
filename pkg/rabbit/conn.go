// Package rabbit is the broker side of the system: one connection per
// process that recovers after a broker restart (reconnect with backoff,
// redeclare the topology), a publisher that waits for publisher confirms and
// treats a mandatory return as a failure, and a consume loop with manual
// acks, bounded prefetch and delayed retries.
package rabbit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/pkg/retry"
)

// Conn owns one AMQP connection and replaces it when it is lost. Publishers
// and consumers ask it for channels; after a reconnect they ask again.
type Conn struct {
	url  string
	topo Topology
	log  *slog.Logger

	mu    sync.Mutex
	conn  *amqp.Connection
	ready chan struct{} // closed while conn is usable; replaced when it is lost
}

// New returns a Conn that is not connected yet: Run connects it.
func New(url string, topo Topology, log *slog.Logger) *Conn {
	return &Conn{url: url, topo: topo, log: log, ready: make(chan struct{})}
}

// Run keeps the connection up until ctx ends: connect with capped
// exponential backoff, declare the topology, wait for the connection to
// close, repeat. On return the connection is closed.
func (c *Conn) Run(ctx context.Context) error {
	backoff := retry.Backoff{Base: 200 * time.Millisecond, Cap: 10 * time.Second}
	failures := 0
	for {
		conn, err := c.connect(ctx)
		if err != nil {
			failures++
			wait := backoff.Delay(failures)
			c.log.Warn("broker connect failed", "err", err, "retry_in", wait.Round(time.Millisecond), "failures", failures)
			if !retry.Wait(ctx, wait) {
				return nil
			}
			continue
		}
		failures = 0
		closed := conn.NotifyClose(make(chan *amqp.Error, 1))
		c.mu.Lock()
		c.conn = conn
		close(c.ready)
		c.mu.Unlock()
		c.log.Info("broker connected")

		select {
		case <-ctx.Done():
			c.markDown()
			_ = conn.Close()
			return nil
		case e := <-closed:
			c.markDown()
			c.log.Warn("broker connection lost", "err", e)
		}
	}
}

func (c *Conn) markDown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn = nil
	select {
	case <-c.ready:
		c.ready = make(chan struct{})
	default:
	}
}

func (c *Conn) connect(ctx context.Context) (*amqp.Connection, error) {
	conn, err := amqp.DialConfig(c.url, amqp.Config{
		Heartbeat: 10 * time.Second,
		Locale:    "en_US",
		Dial:      amqp.DefaultDial(5 * time.Second),
		// Shown in the management UI and rabbitmqctl list_connections.
		Properties: amqp.Table{"connection_name": fmt.Sprintf("%s pid %d (%s)", filepath.Base(os.Args[0]), os.Getpid(), c.topo.Exchange)},
	})
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	if err := c.topo.Declare(conn); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("declare topology: %w", err)
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
			ch, err := conn.Channel()
			if err == nil {
				return ch, nil
			}
			if !errors.Is(err, amqp.ErrClosed) {
				return nil, fmt.Errorf("open channel: %w", err)
			}
			// The connection died under us: wait for Run to replace it.
			c.markDown()
			continue
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("open channel: %w (%w)", ErrNotConnected, ctx.Err())
		case <-ready:
		}
	}
}

// Connected reports whether the connection is up (for /readyz).
func (c *Conn) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn != nil && !c.conn.IsClosed()
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
