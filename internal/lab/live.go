package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/relmsg/ordersaga/internal/stack"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/compose/process"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// Services are the names a Target knows, in the saga's order.
var Services = []string{"order", "inventory", "payment"}

// LiveTarget is a stack started by scripts/up.sh or docker compose: the lab
// (cmd/lab) and the viewer (cmd/viewer) drive it.
type LiveTarget struct {
	urls    map[string]string
	amqpURL string
	runDir  string // where scripts/up.sh keeps stack.json (the instances)
	client  http.Client

	mu      sync.Mutex
	started map[string]string // instance URL -> started_at before a crash
	conn    *rabbit.Conn
	stop    context.CancelFunc
}

// NewLiveTarget reads ORDER_URL, INVENTORY_URL, PAYMENT_URL, PSP_URL (the
// PSP process, without its /psp) and LAB_AMQP_URL, with the addresses of
// scripts/up.sh as defaults, and STACK_RUN_DIR (.run), where scripts/up.sh
// lists every instance.
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
			"psp":       stack.PSPBase(env("PSP_URL", "http://127.0.0.1:8084")),
		},
		amqpURL: env("LAB_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
		runDir:  env("STACK_RUN_DIR", ".run"),
		client:  http.Client{Timeout: 3 * time.Second},
		started: map[string]string{},
	}
}

// URL implements Target.
func (t *LiveTarget) URL(svc string) string { return t.urls[svc] }

// Ready reports whether the service answers /readyz with 200.
func (t *LiveTarget) Ready(ctx context.Context, svc string) error { return t.readyURL(ctx, t.URL(svc)) }

func (t *LiveTarget) readyURL(ctx context.Context, base string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
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

func (t *LiveTarget) startedAtURL(ctx context.Context, base string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
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
		t.conn = rabbit.New(t.amqpURL, topo, slog.New(slog.DiscardHandler))
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

// PrepareCrash implements Target: it notes the start time of every
// instance of the service (a crash failpoint armed on all of them kills
// whichever reaches it first), so AwaitRestart knows a process really died
// and a new one took over.
func (t *LiveTarget) PrepareCrash(ctx context.Context, svc string) error {
	for _, in := range instancesOf(t, svc) {
		s, err := t.startedAtURL(ctx, in.URL)
		if err != nil {
			return fmt.Errorf("%s: %w", in.ID, err)
		}
		t.mu.Lock()
		t.started[in.URL] = s
		t.mu.Unlock()
	}
	return nil
}

// AwaitRestart implements Target: it waits until the supervisor
// (scripts/up.sh's cmd/supervisor, or docker compose's restart policy) has
// brought a new process up in place of one of the service's instances.
func (t *LiveTarget) AwaitRestart(ctx context.Context, svc string) error {
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		for _, in := range instancesOf(t, svc) {
			t.mu.Lock()
			before := t.started[in.URL]
			t.mu.Unlock()
			if s, err := t.startedAtURL(ctx, in.URL); err == nil && s != before && t.readyURL(ctx, in.URL) == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not come back within 90s after the crash (is it supervised? scripts/up.sh and docker compose restart it)", svc)
}

// Instances implements Instanced from the stack file of scripts/up.sh
// (every instance of svc with its INSTANCE_ID and URL, in order). Without
// one, or with a stale one whose first instance is not the one this target
// talks to (docker compose), it returns nil: the first instance only.
func (t *LiveTarget) Instances(svc string) []Instance {
	f, err := stack.Read(t.runDir)
	if err != nil {
		return nil
	}
	for _, s := range stack.Services {
		if strings.ToLower(s.Key) != svc {
			continue
		}
		var out []Instance
		for _, p := range f.Processes {
			if p.Service == s.Name {
				out = append(out, Instance{ID: s.Instance(p.Instance).ID(), URL: strings.TrimRight(p.URL, "/")})
			}
		}
		slices.SortFunc(out, func(a, b Instance) int { return strings.Compare(a.ID, b.ID) })
		if len(out) == 0 || out[0].URL != t.URL(svc) {
			return nil
		}
		return out
	}
	return nil
}
