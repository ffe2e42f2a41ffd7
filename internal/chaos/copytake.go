package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// The copy-take fault: at every consumer of the stack, a delivery and its
// copy in one take of the consume loop, the case a lost publisher confirm
// makes ordinary (the dispatcher publishes the batch again). In a batch
// (CONSUMER_BATCH > 1) both copies then reach the batch layer together,
// where an event with an external call once crashed the process (issue
// 20). For each consumer:
//
//  1. an event new to it: its service's failpoint after the effect is armed
//     with error until one of its deliveries waits in a retry tier, which
//     the run takes out (its transaction rolled back: the consumer has not
//     applied it);
//  2. service by service, every worker of the service is held with a take
//     of its own (rabbit.consume.before-handle, pause), the consumer's
//     idle workers with fillers: copies of an event it has applied, which
//     every path drops as a duplicate;
//  3. the new event is published to the consumer's queue, as it was first
//     published, once per instance and once more, back to back: an
//     instance gets two copies behind its held workers;
//  4. the workers are let go, and rabbit.consume.copy-in-take (pause) holds
//     each take that has a delivery and its copy: seen, then let go.
//
// What must hold: no process exits (every instance is the process it was),
// and the event is applied once (one inbox row); the end-to-end checks
// then find every order where it should be.

// fillersPerInstance fill an instance's workers (CONSUMER_WORKERS, 4 by
// default; up to 8 are covered) and leave one or more waiting behind them.
const fillersPerInstance = 9

// CopyTake is what a copy-take fault did at one consumer.
type CopyTake struct {
	Consumer string `json:"consumer"`
	EventID  string `json:"event_id"` // the event whose copies were sent, new to the consumer
	Type     string `json:"event_type"`
	Copies   int    `json:"copies"`
	Fillers  int    `json:"fillers"`
	// Seen: a take of the consumer's service held a delivery and its copy
	// (rabbit.consume.copy-in-take), one for each of its consumers.
	Seen bool `json:"seen"`
	// Applied is how many inbox rows the consumer has for the event after
	// the copies were handled: one.
	Applied int `json:"applied"`
}

// copyTaker carries out copy-take faults; captures are the capture queue
// of each consumer (Bus.Capture), made when the run starts.
type copyTaker struct {
	obs      *observer
	bus      *Bus
	tag      string
	captures map[string]string
	armed    func(svc, point string) // notes a point the heal must disarm
	traffic  trafficFunc             // orders that go through every consumer, while it prepares
}

// prepared is one consumer's part: a filler and the held new event.
type prepared struct {
	c      Consumer
	filler amqp.Publishing
	event  Held
}

// run makes the copy-take at every consumer and returns what it did; an
// error means it could not be carried out (the heal releases anything
// still held).
func (t *copyTaker) run(ctx context.Context) ([]CopyTake, error) {
	before, err := t.processes(ctx)
	if err != nil {
		return nil, err
	}
	stop := t.traffic(ctx)
	parts, err := t.prepare(ctx)
	stop()
	defer func() {
		for _, p := range parts {
			_ = p.event.Return() // one not sent goes back to its tier (a sent one is acked already)
		}
	}()
	if err != nil {
		return nil, err
	}
	out, err := t.take(ctx, parts)
	if err != nil {
		return out, err
	}
	if err := t.settle(ctx, out); err != nil {
		return out, err
	}
	after, err := t.processes(ctx)
	if err != nil {
		return out, err
	}
	if changed := changedProcesses(before, after); len(changed) > 0 {
		return out, fmt.Errorf("processes changed while the copies were handled: %s", strings.Join(changed, ", "))
	}
	return out, nil
}

// prepare finds each consumer's filler and takes a new event of its out of
// a retry tier: order and inventory at once, payment's three consumers in
// turn (the saga consumer's failpoint fails the other two as well).
func (t *copyTaker) prepare(ctx context.Context) ([]prepared, error) {
	parts := make([]prepared, len(Consumers))
	errs := make([]error, len(Consumers))
	var wg sync.WaitGroup
	for _, svc := range Services {
		wg.Go(func() {
			for _, name := range []string{"payment-psp", "payment-refunds", "payment", "inventory", "order"} {
				i := slices.IndexFunc(Consumers, func(c Consumer) bool { return c.Name == name })
				if Consumers[i].Service != svc {
					continue
				}
				parts[i], errs[i] = t.prepareOne(ctx, Consumers[i])
				if errs[i] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	var got []prepared
	for _, p := range parts {
		if p.event.held() {
			got = append(got, p)
		}
	}
	return got, errors.Join(errs...)
}

func (t *copyTaker) prepareOne(ctx context.Context, c Consumer) (prepared, error) {
	p := prepared{c: c}
	var err error
	if p.filler, err = t.fillerOf(ctx, c); err != nil {
		return p, err
	}
	p.event, err = t.newEvent(ctx, c)
	return p, err
}

// fillerOf is a copy of the latest captured event the consumer applied.
func (t *copyTaker) fillerOf(ctx context.Context, c Consumer) (amqp.Publishing, error) {
	var seen []amqp.Delivery
	deadline := time.Now().Add(30 * time.Second)
	for {
		ds, err := t.bus.Drain(ctx, t.captures[c.Name])
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			_, err = t.bus.Capture(ctx, c, t.tag) // gone with a node or a broker restart: bound again
		}
		if err != nil {
			return amqp.Publishing{}, err
		}
		seen = append(seen, ds...)
		if len(seen) > captured {
			seen = seen[len(seen)-captured:]
		}
		ids := make([]string, len(seen))
		for i, d := range seen {
			ids[i] = d.MessageId
		}
		applied, err := t.obs.applied(ctx, c, ids)
		if err != nil {
			return amqp.Publishing{}, err
		}
		for i := len(seen) - 1; i >= 0; i-- {
			if applied[seen[i].MessageId] > 0 {
				return Filler(Fresh(seen[i])), nil
			}
		}
		if time.Now().After(deadline) {
			return amqp.Publishing{}, fmt.Errorf("%s has applied none of the %d events of its kinds seen in 30s: nothing to fill its workers with", c.Name, len(seen))
		}
		select {
		case <-ctx.Done():
			return amqp.Publishing{}, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// newEvent fails the consumer's transactions (its failpoint armed with
// error) until one of its deliveries waits in a retry tier, and holds it:
// the consumer rolled it back, so it has not applied it.
func (t *copyTaker) newEvent(ctx context.Context, c Consumer) (Held, error) {
	if err := t.obs.arm(ctx, c.Service, c.Fail, "error", 0); err != nil {
		return Held{}, err
	}
	t.armed(c.Service, c.Fail)
	q := t.bus.Queue(c.Queue)
	held, err := t.bus.TakeFirst(ctx, firstTiers(q), c.takes, 30*time.Second)
	if derr := t.obs.disarm(context.WithoutCancel(ctx), c.Service, c.Fail); derr != nil && err == nil {
		err = derr
	}
	if err != nil {
		return Held{}, fmt.Errorf("%s: an event of its in a retry tier (failpoint %s): %w", c.Name, c.Fail, err)
	}
	applied, err := t.obs.applied(ctx, c, []string{held.MessageId})
	if err == nil && applied[held.MessageId] > 0 {
		err = fmt.Errorf("%s: the event %s taken from its retry tier is applied already", c.Name, held.MessageId)
	}
	if err != nil {
		_ = held.Return()
		return Held{}, err
	}
	return held, nil
}

// take does each service in turn (holding one service's consumers for a
// second or so, not the whole saga): its workers held, its consumers'
// workers filled and the copies sent, the workers let go, and the takes
// with a delivery and its copy seen.
func (t *copyTaker) take(ctx context.Context, parts []prepared) ([]CopyTake, error) {
	out := make([]CopyTake, len(parts))
	for _, svc := range Services {
		var idx []int
		for i, p := range parts {
			if p.c.Service == svc {
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 {
			continue
		}
		if err := t.takeAt(ctx, svc, parts, idx, out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// takeAt is take at one service, for the parts idx names.
func (t *copyTaker) takeAt(ctx context.Context, svc string, parts []prepared, idx []int, out []CopyTake) error {
	if err := t.obs.arm(ctx, svc, rabbit.FailpointBeforeHandle, "pause", 0); err != nil {
		return err
	}
	t.armed(svc, rabbit.FailpointBeforeHandle)
	release := func() error { return t.obs.disarm(context.WithoutCancel(ctx), svc, rabbit.FailpointBeforeHandle) }
	errs := make([]error, len(idx))
	var wg sync.WaitGroup
	for k, i := range idx {
		wg.Go(func() { out[i], errs[k] = t.fill(ctx, parts[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return errors.Join(err, release())
	}
	if err := t.obs.arm(ctx, svc, rabbit.FailpointCopyInTake, "pause", 0); err != nil {
		return errors.Join(err, release())
	}
	t.armed(svc, rabbit.FailpointCopyInTake)
	if err := release(); err != nil {
		return err
	}
	var mine []prepared
	for _, i := range idx {
		mine = append(mine, parts[i])
	}
	seen := t.seen(ctx, svc, mine)
	for _, i := range idx {
		out[i].Seen = seen
	}
	return t.obs.disarm(context.WithoutCancel(ctx), svc, rabbit.FailpointCopyInTake)
}

// fill gives every worker of the part's consumer a filler, one at a time
// (an idle worker takes it alone, and is held), leaves fillers waiting
// behind them, then sends the copies of its new event back to back. A
// filler the broker keeps means the consumer holds all the messages its
// prefetch allows (live ones): its workers are all held already.
func (t *copyTaker) fill(ctx context.Context, p prepared) (CopyTake, error) {
	q := t.bus.Queue(p.c.Queue)
	n := len(t.obs.instances[p.c.Service])
	ct := CopyTake{Consumer: p.c.Name, EventID: p.event.MessageId, Type: p.event.Type, Copies: n + 1}
	for range n * fillersPerInstance {
		if err := t.bus.Publish(ctx, q, p.filler); err != nil {
			return ct, err
		}
		ct.Fillers++
		if !t.delivered(ctx, q) {
			break
		}
		time.Sleep(30 * time.Millisecond) // an idle worker takes it and is held
	}
	copies := make([]amqp.Publishing, ct.Copies)
	for k := range copies {
		copies[k] = Fresh(p.event.Delivery)
	}
	if err := t.bus.Publish(ctx, q, copies...); err != nil {
		return ct, err
	}
	t.delivered(ctx, q)
	return ct, p.event.Ack()
}

// delivered waits up to two seconds until nothing waits in q: the broker
// gave it all to the consumers.
func (t *copyTaker) delivered(ctx context.Context, q string) bool {
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(10 * time.Millisecond) {
		if n, err := t.bus.Waiting(ctx, q); err == nil && n == 0 {
			return true
		}
	}
	return false
}

// seen waits until svc holds at rabbit.consume.copy-in-take one take per
// consumer it got copies for. Copies that queued on the broker behind a
// backlog (a consumer holding all its prefetch allows already) come out
// with it, so the wait is long: 60 s. With one instance it ends early once
// every event is applied, which both copies in one take held there would
// prevent.
func (t *copyTaker) seen(ctx context.Context, svc string, parts []prepared) bool {
	single := len(t.obs.instances[svc]) == 1
	end := time.Now().Add(60 * time.Second)
	for check := time.Now(); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
		held, err := t.obs.held(ctx, svc, rabbit.FailpointCopyInTake)
		if err == nil && held >= len(parts) {
			return true
		}
		if !single || err != nil || time.Since(check) < time.Second {
			continue
		}
		check = time.Now()
		done := 0 // applied: its copies were not both in a held take
		for _, p := range parts {
			if applied, err := t.obs.applied(ctx, p.c, []string{p.event.MessageId}); err == nil && applied[p.event.MessageId] > 0 {
				done++
			}
		}
		if held+done >= len(parts) {
			return false
		}
	}
	return false
}

// settle waits until each consumer has applied its event, and counts the
// inbox rows.
func (t *copyTaker) settle(ctx context.Context, out []CopyTake) error {
	deadline := time.Now().Add(60 * time.Second)
	for i := range out {
		c, _ := consumerNamed(out[i].Consumer)
		for {
			applied, err := t.obs.applied(ctx, c, []string{out[i].EventID})
			if err != nil {
				return err
			}
			if out[i].Applied = applied[out[i].EventID]; out[i].Applied > 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s has not applied %s within 60s of its copies", c.Name, out[i].EventID)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// describeCopyTakes is a copy-take's detail: each consumer's copies.
func describeCopyTakes(takes []CopyTake) string {
	var parts []string
	for _, t := range takes {
		seen := "seen in one take"
		if !t.Seen {
			seen = "NOT seen in one take"
		}
		parts = append(parts, fmt.Sprintf("%s %dx %s (%s, applied %d)", t.Consumer, t.Copies, short(t.EventID), seen, t.Applied))
	}
	if len(parts) == 0 {
		return "no consumer reached"
	}
	return strings.Join(parts, "; ")
}

// short is the end of an event id: UUIDv7s made close together share
// their start.
func short(id string) string { return "…" + id[max(0, len(id)-8):] }

// processes identifies every instance's process (its start time).
func (t *copyTaker) processes(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	for _, in := range t.obs.all() {
		s, err := t.obs.startedAt(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("%s /healthz: %w", in, err)
		}
		out[in] = s
	}
	return out, nil
}

func changedProcesses(before, after map[string]string) []string {
	var out []string
	for _, in := range sortedKeys(before) {
		if after[in] != before[in] {
			out = append(out, fmt.Sprintf("%s started again (%s, was %s)", in, after[in], before[in]))
		}
	}
	return out
}

// applied counts the consumer's inbox rows of each event, read from its
// service (GET /admin/inbox, at most 200 ids a request).
func (o *observer) applied(ctx context.Context, c Consumer, ids []string) (map[string]int, error) {
	out := map[string]int{}
	for start := 0; start < len(ids); start += 200 {
		part := ids[start:min(start+200, len(ids))]
		var rows struct {
			Inbox []struct {
				Consumer string `json:"consumer"`
				EventID  string `json:"event_id"`
			} `json:"inbox"`
		}
		if err := o.lab.Get(ctx, c.Service, "/admin/inbox?event_id="+url.QueryEscape(strings.Join(part, ",")), &rows); err != nil {
			return nil, err
		}
		for _, r := range rows.Inbox {
			if r.Consumer == c.Name {
				out[r.EventID]++
			}
		}
	}
	return out, nil
}
