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
	"net/url"
	"strings"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/wire"
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

// --- domain calls -------------------------------------------------------

// The services' records, as their APIs write them (pkg/base/wire, held to
// docs/openapi.yaml).
type (
	// Order is an order as the API shows it.
	Order = wire.Order
	// Item is one order line, at the price the order was accepted at.
	Item = wire.OrderItem
	// Stock is one SKU's stock.
	Stock = wire.Stock
	// Reservation is an order's reservation ("" status when there is none).
	Reservation = wire.Reservation
	// Payment is an order's payment ("" status when there is none).
	Payment = wire.Payment
	// Charge is one charge in the PSP's books.
	Charge = wire.Charge
	// Refund is one refund in the PSP's books.
	Refund = wire.PSPRefund
)

func (l *Lab) createOrder(ctx context.Context, key, customer, sku string, qty int) (Order, int, http.Header, error) {
	var o Order
	body := wire.CreateOrderRequest{CustomerID: customer, Items: []wire.OrderLine{{SKU: sku, Quantity: qty}}}
	code, hdr, err := l.call(ctx, "order", http.MethodPost, "/orders", map[string]string{"Idempotency-Key": key}, body, &o)
	if err == nil && code == http.StatusAccepted {
		l.step(Step{Kind: StepOrder, OrderID: o.OrderID})
	}
	return o, code, hdr, err
}

// placeOrder creates an order for the lab's customer and fails unless the
// order service accepted it (202): for scenarios whose fault comes later.
func (l *Lab) placeOrder(ctx context.Context, key, sku string, qty int) (Order, error) {
	o, code, _, err := l.createOrder(ctx, key, "c-lab", sku, qty)
	if err != nil || code != http.StatusAccepted {
		return o, fmt.Errorf("create: %d %v", code, err)
	}
	return o, nil
}

func (l *Lab) order(ctx context.Context, id string) (Order, int, error) {
	var o Order
	code, _, err := l.call(ctx, "order", http.MethodGet, "/orders/"+id, nil, nil, &o)
	return o, code, err
}

func (l *Lab) waitOrder(ctx context.Context, id, status string) error {
	return l.waitFor(ctx, "order "+id+" to be "+status, func() (bool, error) {
		o, _, err := l.order(ctx, id)
		return o.Status == status, err
	})
}

// waitSettled waits until the order is confirmed and inventory has
// committed its reservation: the order's state and the stock numbers come
// from two services, and the second lags the first.
func (l *Lab) waitSettled(ctx context.Context, id string) error {
	if err := l.waitOrder(ctx, id, "confirmed"); err != nil {
		return err
	}
	return l.waitFor(ctx, "inventory to commit order "+id, func() (bool, error) {
		res, err := l.reservation(ctx, id)
		return res.Status == "committed", err
	})
}

func (l *Lab) lastOrderID(ctx context.Context) (uint64, error) {
	var list wire.OrderList
	if err := l.get(ctx, "order", "/orders?limit=1", &list); err != nil {
		return 0, err
	}
	if len(list.Orders) == 0 {
		return 0, nil
	}
	var id uint64
	_, err := fmt.Sscan(list.Orders[0].OrderID, &id)
	return id, err
}

func (l *Lab) stock(ctx context.Context, sku string) (Stock, error) {
	var s Stock
	return s, l.get(ctx, "inventory", "/stock/"+url.PathEscape(sku), &s)
}

func (l *Lab) reservation(ctx context.Context, id string) (Reservation, error) {
	var r Reservation
	code, _, err := l.call(ctx, "inventory", http.MethodGet, "/reservations/"+id, nil, nil, &r)
	if code == http.StatusNotFound {
		return Reservation{}, nil
	}
	return r, err
}

func (l *Lab) payment(ctx context.Context, id string) (Payment, error) {
	var p Payment
	code, _, err := l.call(ctx, "payment", http.MethodGet, "/payments/"+id, nil, nil, &p)
	if code == http.StatusNotFound {
		return Payment{}, nil
	}
	return p, err
}

func (l *Lab) charges(ctx context.Context, id string) ([]Charge, error) {
	var c wire.ChargeList
	return c.Charges, l.get(ctx, "psp", "/psp/charges?order_ref="+url.QueryEscape(id), &c)
}

func (l *Lab) refunds(ctx context.Context, chargeID string) ([]Refund, error) {
	var f wire.PSPRefundList
	return f.Refunds, l.get(ctx, "psp", "/psp/refunds?charge_id="+url.QueryEscape(chargeID), &f)
}

// --- messaging tables (admin endpoints) ----------------------------------

// OutboxRow is one outbox row.
type OutboxRow struct {
	EventID          string          `json:"event_id"`
	AggregateID      string          `json:"aggregate_id"`
	AggregateVersion uint64          `json:"aggregate_version"`
	EventType        string          `json:"event_type"`
	Status           string          `json:"status"`
	Attempts         int             `json:"attempts"`
	TotalAttempts    int             `json:"total_attempts"`
	NextAttemptAt    time.Time       `json:"next_attempt_at"`
	FirstAttemptAt   *time.Time      `json:"first_attempt_at"`
	ClaimToken       *string         `json:"claim_token"`
	LeaseUntil       *time.Time      `json:"lease_until"`
	CreatedAt        time.Time       `json:"created_at"`
	SentAt           *time.Time      `json:"sent_at"`
	Payload          json.RawMessage `json:"payload"`
}

func (l *Lab) outbox(ctx context.Context, svc, orderID string) ([]OutboxRow, error) {
	var out struct {
		Events []OutboxRow `json:"events"`
	}
	return out.Events, l.get(ctx, svc, "/admin/outbox?aggregate_id="+orderID, &out)
}

func (l *Lab) outboxEvent(ctx context.Context, svc, orderID, typ string) (OutboxRow, error) {
	rows, err := l.outbox(ctx, svc, orderID)
	if err != nil {
		return OutboxRow{}, err
	}
	for _, r := range rows {
		if r.EventType == typ {
			return r, nil
		}
	}
	return OutboxRow{}, fmt.Errorf("no %s event for order %s in the %s outbox", typ, orderID, svc)
}

// InboxRow is one processed event.
type InboxRow struct {
	Consumer    string    `json:"consumer"`
	EventID     string    `json:"event_id"`
	ProcessedAt time.Time `json:"processed_at"`
}

func (l *Lab) inbox(ctx context.Context, svc string, ids []string) ([]InboxRow, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var out struct {
		Inbox []InboxRow `json:"inbox"`
	}
	return out.Inbox, l.get(ctx, svc, "/admin/inbox?event_id="+url.QueryEscape(strings.Join(ids, ",")), &out)
}

// --- failpoints, switches, metrics --------------------------------------

// FailpointStatus is an armed failpoint.
type FailpointStatus struct {
	Name      string `json:"name"`
	Action    string `json:"action"`
	Remaining int    `json:"remaining"`
	Hits      int    `json:"hits"`
	Paused    int    `json:"paused"`
}

// arm, release, disarm, failpoint and setWrongWay act on the instances
// of svc that l.targets names (every instance unless Lab.Instance narrows
// it), and their steps say which.

func (l *Lab) arm(ctx context.Context, svc, point, action string, count int) error {
	in, err := l.onTargets(ctx, svc, http.MethodPut, "/debug/failpoints/"+point,
		map[string]any{"action": action, "count": count}, "arm "+point, " (is DEMO_MODE on?)")
	if err == nil {
		l.step(Step{Kind: StepArmed, Service: svc, Instances: l.acted(svc, in), Point: point, Action: action, Count: count})
	}
	return err
}

func (l *Lab) release(ctx context.Context, svc, point string) error {
	in, err := l.onTargets(ctx, svc, http.MethodPost, "/debug/failpoints/"+point+"/release", nil, "release "+point, "")
	if err == nil {
		l.step(Step{Kind: StepReleased, Service: svc, Instances: l.acted(svc, in), Point: point})
	}
	return err
}

// onTargets sends one request to each instance l.targets(svc) names and
// wants 200 from each; the first failure ends it, as "<what> on <instance>:
// status <code><hint>".
func (l *Lab) onTargets(ctx context.Context, svc, method, path string, body any, what, hint string) ([]Instance, error) {
	in := l.targets(svc)
	for _, i := range in {
		code, _, err := l.callAt(ctx, i.ID, i.URL, method, path, nil, body, nil)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%s on %s: status %d%s", what, i.ID, code, hint)
		}
		if err != nil {
			return in, err
		}
	}
	return in, nil
}

func (l *Lab) disarm(ctx context.Context, svc, point string) error {
	in := l.targets(svc)
	var first error
	for _, i := range in {
		if _, _, err := l.callAt(ctx, i.ID, i.URL, http.MethodDelete, "/debug/failpoints/"+point, nil, nil, nil); err != nil && first == nil {
			first = err
		}
	}
	if first == nil {
		l.step(Step{Kind: StepDisarmed, Service: svc, Instances: l.acted(svc, in), Point: point})
	}
	return first
}

// failpoint is the point's status summed over the targeted instances: hit
// or paused on any of them counts.
func (l *Lab) failpoint(ctx context.Context, svc, point string) (FailpointStatus, error) {
	sum := FailpointStatus{Name: point}
	for _, i := range l.targets(svc) {
		var list struct {
			Armed []FailpointStatus `json:"armed"`
		}
		code, _, err := l.callAt(ctx, i.ID, i.URL, http.MethodGet, "/debug/failpoints", nil, nil, &list)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%s GET /debug/failpoints: status %d", i.ID, code)
		}
		if err != nil {
			return sum, err
		}
		for _, st := range list.Armed {
			if st.Name == point {
				sum.Action = st.Action
				sum.Remaining += st.Remaining
				sum.Hits += st.Hits
				sum.Paused += st.Paused
			}
		}
	}
	return sum, nil
}

// waitHit waits until the failpoint has been hit at least once.
func (l *Lab) waitHit(ctx context.Context, what, svc, point string) error {
	err := l.waitFor(ctx, what, func() (bool, error) {
		fp, err := l.failpoint(ctx, svc, point)
		return fp.Hits >= 1, err
	})
	if err == nil {
		l.step(Step{Kind: StepHit, Service: svc, Point: point})
	}
	return err
}

// waitPaused waits until a caller is held at the (pause) failpoint.
func (l *Lab) waitPaused(ctx context.Context, what, svc, point string) error {
	err := l.waitFor(ctx, what, func() (bool, error) {
		fp, err := l.failpoint(ctx, svc, point)
		return fp.Paused > 0, err
	})
	if err == nil {
		l.step(Step{Kind: StepPaused, Service: svc, Point: point})
	}
	return err
}

func (l *Lab) setWrongWay(ctx context.Context, svc string, switches ...string) error {
	if switches == nil {
		switches = []string{}
	}
	in, err := l.onTargets(ctx, svc, http.MethodPut, "/debug/wrong-way", map[string]any{"on": switches},
		"wrong-way switches", " (is DEMO_MODE on?)")
	if err == nil {
		l.step(Step{Kind: StepWrongWay, Service: svc, Instances: l.acted(svc, in), Switches: switches})
	}
	return err
}

// wrongWayOn turns the run's wrong-way switch on at svc, on a wrong-way run
// only.
func (l *Lab) wrongWayOn(ctx context.Context, r *Report, svc string) error {
	if r.WrongWay == "" {
		return nil
	}
	return l.setWrongWay(ctx, svc, r.WrongWay)
}

// metric reads one sample from a service's /metrics: the sum over every
// series of name whose labels have the given values.
func (l *Lab) metric(ctx context.Context, svc, name string, labels ...string) (float64, error) {
	families, err := Scrape(ctx, &l.client, l.T.URL(svc)+"/metrics")
	if err != nil {
		return 0, err
	}
	return SumSamples(families, name, labels...), nil
}

// EnvelopeOf rebuilds the envelope of an outbox row, to publish it again
// with its original event_id (a copy: what a re-send or a redelivery is).
func EnvelopeOf(r OutboxRow) events.Envelope {
	var id uint64
	fmt.Sscan(r.AggregateID, &id)
	return events.Envelope{EventID: r.EventID, Type: r.EventType, AggregateID: id,
		AggregateVersion: r.AggregateVersion, SchemaVersion: events.CurrentSchemaVersion,
		CorrelationID: r.AggregateID, OccurredAt: r.CreatedAt, Payload: r.Payload}
}
