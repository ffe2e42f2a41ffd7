package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/relmsg/ordersaga/pkg/events"
	"github.com/relmsg/ordersaga/pkg/process"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// Services are the names a Target knows, in the saga's order.
var Services = []string{"order", "inventory", "payment"}

// LiveTarget is a stack started by scripts/up.sh or docker compose: the lab
// (cmd/lab) and the viewer (cmd/viewer) drive it.
type LiveTarget struct {
	urls    map[string]string
	amqpURL string
	client  http.Client

	mu      sync.Mutex
	started map[string]string // service -> started_at before a crash
	conn    *rabbit.Conn
	stop    context.CancelFunc
}

// NewLiveTarget reads ORDER_URL, INVENTORY_URL, PAYMENT_URL, PSP_URL (the
// PSP process, without its /psp) and LAB_AMQP_URL, with the addresses of
// scripts/up.sh as defaults.
func NewLiveTarget(getenv func(string) string) *LiveTarget {
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	return &LiveTarget{
		urls: map[string]string{
			"order":     strings.TrimRight(env("ORDER_URL", "http://127.0.0.1:8081"), "/"),
			"inventory": strings.TrimRight(env("INVENTORY_URL", "http://127.0.0.1:8082"), "/"),
			"payment":   strings.TrimRight(env("PAYMENT_URL", "http://127.0.0.1:8083"), "/"),
			"psp":       strings.TrimSuffix(strings.TrimRight(env("PSP_URL", "http://127.0.0.1:8084"), "/"), "/psp"),
		},
		amqpURL: env("LAB_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
		client:  http.Client{Timeout: 3 * time.Second},
		started: map[string]string{},
	}
}

// URL implements Target.
func (t *LiveTarget) URL(svc string) string { return t.urls[svc] }

// Ready reports whether the service answers /readyz with 200.
func (t *LiveTarget) Ready(ctx context.Context, svc string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, t.URL(svc)+"/readyz", nil)
	resp, err := t.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz answered %d", resp.StatusCode)
	}
	return nil
}

func (t *LiveTarget) startedAt(ctx context.Context, svc string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, t.URL(svc)+"/healthz", nil)
	resp, err := t.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var h struct {
		StartedAt string `json:"started_at"`
	}
	err = json.NewDecoder(resp.Body).Decode(&h)
	return h.StartedAt, err
}

// broker returns the lab's connection to the broker's AMQP port,
// connecting on first use.
func (t *LiveTarget) broker(ctx context.Context) (*rabbit.Conn, error) {
	t.mu.Lock()
	if t.conn == nil {
		topo := rabbit.Topology{Exchange: rabbit.Namespace("").Exchange(), DeadLetterExchange: rabbit.Namespace("").DeadLetterExchange()}
		t.conn = rabbit.New(t.amqpURL, topo, slog.New(slog.NewTextHandler(io.Discard, nil)))
		cctx, cancel := context.WithCancel(context.Background())
		t.stop = cancel
		go t.conn.Run(cctx)
	}
	conn := t.conn
	t.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := conn.WaitConnected(wctx); err != nil {
		return nil, fmt.Errorf("broker at %s (set LAB_AMQP_URL): %w", process.MaskURL(t.amqpURL), err)
	}
	return conn, nil
}

// Publish implements Target: it sends an event to saga.events.
func (t *LiveTarget) Publish(ctx context.Context, e events.Envelope) error {
	conn, err := t.broker(ctx)
	if err != nil {
		return err
	}
	pub := conn.NewPublisher()
	defer pub.Close()
	return pub.Publish(ctx, []rabbit.Message{rabbit.FromEnvelope(rabbit.Namespace("").Exchange(), e)}, 5*time.Second)[0]
}

// Bind implements Target on saga.events.
func (t *LiveTarget) Bind(ctx context.Context, queue, key string, bound bool) error {
	conn, err := t.broker(ctx)
	if err != nil {
		return err
	}
	return Rebind(ctx, conn, rabbit.Namespace(""), queue, key, bound)
}

// Rebind binds or unbinds queue (without the namespace) to key on the
// namespace's saga exchange: Target.Bind for a stack on conn's broker.
func Rebind(ctx context.Context, conn *rabbit.Conn, ns rabbit.Namespace, queue, key string, bound bool) error {
	ch, err := conn.Channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	if bound {
		err = ch.QueueBind(ns.Queue(queue), key, ns.Exchange(), false, nil)
	} else {
		err = ch.QueueUnbind(ns.Queue(queue), key, ns.Exchange(), nil)
	}
	if err != nil {
		return fmt.Errorf("bind %s to %s (bound=%v): %w", ns.Queue(queue), key, bound, err)
	}
	return nil
}

// Close drops the broker connection Publish opened, if any.
func (t *LiveTarget) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stop != nil {
		t.stop()
		t.stop, t.conn = nil, nil
	}
}

// PrepareCrash implements Target: it notes the service's start time, so
// AwaitRestart knows the process really died and a new one took over.
func (t *LiveTarget) PrepareCrash(ctx context.Context, svc string) error {
	s, err := t.startedAt(ctx, svc)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.started[svc] = s
	t.mu.Unlock()
	return nil
}

// AwaitRestart implements Target: it waits until the supervisor
// (scripts/up.sh's cmd/stack, or docker compose's restart policy) has
// brought a new process up.
func (t *LiveTarget) AwaitRestart(ctx context.Context, svc string) error {
	t.mu.Lock()
	before := t.started[svc]
	t.mu.Unlock()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if s, err := t.startedAt(ctx, svc); err == nil && s != before && t.Ready(ctx, svc) == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not come back within 90s after the crash (is it supervised? scripts/up.sh and docker compose restart it)", svc)
}
