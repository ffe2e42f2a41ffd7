// Package lab runs the chapter's fault experiments against a running stack,
// over HTTP only, so the same code serves the Go tests (TestExperiment*,
// against services started in-process or as child processes) and the live
// lab (scripts/experiment.sh, against scripts/up.sh or docker compose).
//
// Each experiment records the rows that matter (order, outbox and inbox
// rows, stock, reservation, payment, PSP charges) before the fault, after
// the fault and after recovery, checks states, quantities, amounts and side
// effects, checks that the fault window was really hit, and ends with a
// verdict naming the constraint or recovery job that held. Run with a
// wrong-way switch on, the same experiment checks that the anomaly the
// mechanism prevents really appears.
//
// Every check (labels.go) reads only the experiment's own orders and
// events: their rows, reservations and charges, and what the services
// logged about those events (journal.go). None reads a service-wide
// counter or a SKU's total stock, so other traffic on the same stack (a
// load run's leftovers, another reader's orders) cannot change a verdict.
// The faults are not scoped that way: a failpoint belongs to a process, and
// an order someone else places while one is armed may take it.
package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/events"
)

// Target is a running stack.
type Target interface {
	// URL is the base URL of "order", "inventory", "payment" or "psp" (the
	// PSP process: its books and switches under /psp).
	URL(service string) string
	// Publish sends an event straight to the saga exchange, as a duplicate
	// delivery or a reordering network would.
	Publish(ctx context.Context, e events.Envelope) error
	// PrepareCrash makes sure a "crash" failpoint in service kills a real
	// process (tests swap an in-process service for a child process).
	PrepareCrash(ctx context.Context, service string) error
	// AwaitRestart returns once a crashed service serves again: tests start
	// it again; on a live stack the supervisor (up.sh, docker compose)
	// restarts it.
	AwaitRestart(ctx context.Context, service string) error
}

// Binder is a Target that can change the broker's bindings (the unroutable
// experiment needs it; LiveTarget and the tests' target are Binders).
type Binder interface {
	// Bind binds (bound) or unbinds a service's queue, named without the
	// stack's namespace ("inventory.order-events"), to a routing key of the
	// saga exchange, as an operator's mistake or a deploy in progress would.
	Bind(ctx context.Context, queue, key string, bound bool) error
}

// Lab drives one target.
type Lab struct {
	T     Target
	Token string    // ADMIN_TOKEN, if the stack uses one
	Out   io.Writer // progress lines; nil for none
	// Steps, if set, is told each step as it happens, on the experiment's
	// goroutine (the viewer shows them; Out is for a terminal).
	Steps func(Step)
	// Patience bounds every wait for recovery.
	Patience time.Duration
	// Instance narrows failpoints and wrong-way switches to one instance
	// (its INSTANCE_ID, "order-2") on a stack of several; "" or
	// AllInstances: every instance of the service (see targets).
	Instance string

	client http.Client
}

// New returns a lab for target t.
func New(t Target, token string, out io.Writer) *Lab {
	return &Lab{T: t, Token: token, Out: out, Patience: 90 * time.Second, client: http.Client{Timeout: 10 * time.Second}}
}

// call sends a JSON request to a service and decodes a JSON answer.
func (l *Lab) call(ctx context.Context, svc, method, path string, headers map[string]string, body, out any) (int, http.Header, error) {
	return l.callAt(ctx, svc, l.T.URL(svc), method, path, headers, body, out)
}

// callAt is call to one instance: svc names it in errors, base is its URL.
func (l *Lab) callAt(ctx context.Context, svc, base, method, path string, headers map[string]string, body, out any) (int, http.Header, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if l.Token != "" {
		req.Header.Set("Authorization", "Bearer "+l.Token)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s %s: %w", svc, method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, resp.Header, err
	}
	if out != nil && len(data) > 0 && resp.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, resp.Header, fmt.Errorf("%s %s %s: decode %q: %w", svc, method, path, data, err)
		}
	}
	if resp.StatusCode >= 500 && out != nil {
		return resp.StatusCode, resp.Header, nil
	}
	return resp.StatusCode, resp.Header, nil
}

// get is call for GETs that must answer 200.
func (l *Lab) get(ctx context.Context, svc, path string, out any) error {
	code, _, err := l.call(ctx, svc, http.MethodGet, path, nil, nil, out)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("%s GET %s: status %d", svc, path, code)
	}
	return nil
}

// progress prints a line that is overwritten by the next one.
func (l *Lab) progress(format string, args ...any) {
	if l.Out != nil {
		fmt.Fprintf(l.Out, "\r\033[K  ... "+format, args...)
	}
}

func (l *Lab) progressDone() {
	if l.Out != nil {
		fmt.Fprint(l.Out, "\r\033[K")
	}
}

// waitFor polls cond until it holds, showing what it waits for and for how
// long, up to l.Patience.
func (l *Lab) waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	return l.waitUpTo(ctx, what, l.Patience, cond)
}

// waitUpTo is waitFor with its own bound, for a wait the stack's settings
// decide (a deadline of minutes).
func (l *Lab) waitUpTo(ctx context.Context, what string, patience time.Duration, cond func() (bool, error)) error {
	start := time.Now()
	defer l.progressDone()
	l.step(Step{Kind: StepWaiting, What: what})
	for {
		ok, err := cond()
		if err == nil && ok {
			l.step(Step{Kind: StepWaited, What: what, Seconds: time.Since(start).Seconds()})
			return nil
		}
		if time.Since(start) > patience {
			if err != nil {
				return fmt.Errorf("waiting for %s: %w", what, err)
			}
			return fmt.Errorf("gave up waiting for %s after %s", what, patience)
		}
		l.progress("waiting for %s (%.1fs)", what, time.Since(start).Seconds())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
