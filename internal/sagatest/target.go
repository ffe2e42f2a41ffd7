package sagatest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/lab"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

// Target lets the failure lab (internal/lab) drive a test stack: the same
// experiments the live lab runs against scripts/up.sh.
type Target struct {
	t     testing.TB
	s     *Saga
	conn  *rabbit.Conn
	mu    sync.Mutex
	procs map[string]*Process
}

// NewTarget wraps a started stack.
func NewTarget(t testing.TB, s *Saga) *Target {
	topo := rabbit.Topology{Exchange: s.NS.Exchange(), DeadLetterExchange: s.NS.DeadLetterExchange()}
	return &Target{t: t, s: s, conn: rabbittest.Conn(t, topo), procs: map[string]*Process{}}
}

func (tg *Target) service(name string) *Service {
	switch name {
	case "order":
		return tg.s.Order
	case "inventory":
		return tg.s.Inventory
	case "payment":
		return tg.s.Payment
	case "psp":
		return tg.s.PSP
	}
	tg.t.Fatalf("no service %q", name)
	return nil
}

// URL implements lab.Target.
func (tg *Target) URL(service string) string { return tg.service(service).URL }

// Publish implements lab.Target: a confirmed publish to the stack's exchange.
func (tg *Target) Publish(ctx context.Context, e events.Envelope) error {
	if tg.s.tap != nil {
		tg.s.tap.skipID(e.EventID) // the test's own message, not a service's
	}
	pub := tg.conn.NewPublisher()
	defer pub.Close()
	return pub.Publish(ctx, []rabbit.Message{rabbit.FromEnvelope(tg.s.NS.Exchange(), e)}, 5*time.Second)[0]
}

// Bind implements lab.Target on the stack's namespace.
func (tg *Target) Bind(ctx context.Context, queue, key string, bound bool) error {
	if tg.s.tap != nil {
		// The tap must not route what the experiment makes unroutable.
		if err := tg.s.tap.route(key, bound); err != nil {
			return err
		}
	}
	return lab.Rebind(ctx, tg.conn, tg.s.NS, queue, key, bound)
}

// PrepareCrash implements lab.Target: the in-process service is stopped
// and the same service runs as a child process, so that a crash failpoint
// kills a real process.
func (tg *Target) PrepareCrash(ctx context.Context, service string) error {
	svc := tg.service(service)
	svc.Stop()
	p := svc.StartProcess(nil)
	tg.mu.Lock()
	tg.procs[service] = p
	tg.mu.Unlock()
	return nil
}

// AwaitRestart implements lab.Target: it waits for the child process to
// die, checks that SIGKILL killed it, and starts the service again.
func (tg *Target) AwaitRestart(ctx context.Context, service string) error {
	tg.mu.Lock()
	p := tg.procs[service]
	delete(tg.procs, service)
	tg.mu.Unlock()
	if p == nil {
		return fmt.Errorf("%s was not prepared for a crash", service)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	killed, err := p.WaitExit(wctx)
	if err != nil {
		return fmt.Errorf("%s did not crash: %w", service, err)
	}
	if !killed {
		return fmt.Errorf("%s exited, but not by SIGKILL", service)
	}
	tg.service(service).Start()
	return nil
}
