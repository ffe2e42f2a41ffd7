package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The db-outage fault: a service's database is gone for longer than its
// consumers' retry budget (inbox.Config: 8 attempts, 0.5 s doubling to a
// minute, so 32 to 64 s from a delivery's first failure to its last
// attempt). The service's account is locked and its sessions killed
// (new connections refused), as an outage would do, until a delivery of
// the run is seen to reach its give-up (the chapter's 死信不是垃圾桶: a
// delivery out of attempts becomes a dead letter, and while the database
// refuses the dead letter too, it stays on the broker and comes back), or
// outageCap passes. Then the account is unlocked.
//
// What must hold: every delivery that gave up is applied once afterwards
// or is a recorded dead letter (none dropped); dead letters recorded
// meanwhile are redriven as an operator would, and counted. The give-up
// is read in the service's journal (GET /debug/journal, demo mode), by
// the orders of the run: the log lines of pkg/inbox below.

// outageCap bounds an outage: above the longest budget (63.5 s) with room
// for a loaded machine. An outage that reaches it saw no give-up.
const outageCap = 100 * time.Second

// firstGiveUp is the earliest a delivery can reach its give-up: the
// shortest waits of its seven retries (half of 0.5 s doubling, 31.75 s);
// the journal is read from then on.
const firstGiveUp = 30 * time.Second

// The log lines of pkg/inbox's give-up path: the dead letter refused by
// the database (the delivery stays on the broker), or recorded.
const (
	logDeadLetterRefused = "could not record the dead letter; the message stays on the broker and comes back"
	logDeadLettered      = "event dead-lettered"
)

// Outage is what a db-outage fault did and reached.
type Outage struct {
	Service string        `json:"service"`
	Account string        `json:"account"` // what was locked and killed
	Held    time.Duration `json:"held_ns"`
	// GaveUp are the deliveries seen on their give-up path during the
	// outage, each with what became of it (filled in at rest).
	GaveUp      []GaveUp `json:"gave_up"`
	DeadLetters int      `json:"dead_letters"` // recorded at the service during the outage
	Redriven    int      `json:"redriven"`     // of those, redriven after it
}

// GaveUp is one delivery out of attempts during an outage.
type GaveUp struct {
	Consumer string `json:"consumer"`
	EventID  string `json:"event_id"`
	OrderID  string `json:"order_id"`
	Attempt  int    `json:"attempt"`  // the highest attempt seen giving up
	Recorded bool   `json:"recorded"` // the dead letter was recorded, not refused
	// Settled is what the consumer holds of it at rest: "applied" (an
	// inbox row), "dead letter", or "" (lost).
	Settled string `json:"settled"`
}

func (o *Outage) String() string {
	if o == nil {
		return ""
	}
	s := fmt.Sprintf("%s locked %s; %d deliveries reached their give-up", o.Account, round(o.Held), len(o.GaveUp))
	if len(o.GaveUp) > 0 {
		top := slices.MaxFunc(o.GaveUp, func(a, b GaveUp) int { return a.Attempt - b.Attempt })
		s += fmt.Sprintf(" (up to attempt %d)", top.Attempt)
	}
	if o.DeadLetters > 0 {
		s += fmt.Sprintf("; %d dead letters recorded, %d redriven", o.DeadLetters, o.Redriven)
	}
	return s
}

// orderLister lists the run's orders.
type orderLister func(ctx context.Context) ([]string, error)

// dbOutage locks svc's database account until a delivery gives up (or
// limit), unlocks it, and redrives what became a dead letter meanwhile.
func (in *injector) dbOutage(ctx context.Context, svc string, limit time.Duration) (*Outage, error) {
	out := &Outage{Service: svc}
	if in.db == nil || in.orders == nil {
		return out, errors.New("db-outage needs the database's root connection")
	}
	began := time.Now()
	detail, unlock, err := in.db.LockAccount(ctx, svc)
	if err != nil {
		return out, err
	}
	out.Account = detail
	in.mu.Lock()
	in.accounts = append(in.accounts, unlock)
	in.mu.Unlock()
	// Deliveries to fail from the start, the load on or over: orders sent
	// in the outage's first seconds reach the payment service's consumers
	// while its database refuses.
	stop := in.traffic(ctx)
	time.AfterFunc(5*time.Second, stop)
	var watchErr error
	for time.Since(began) < limit && ctx.Err() == nil {
		wait := 3 * time.Second
		if time.Since(began) < firstGiveUp {
			wait = time.Until(began.Add(firstGiveUp))
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		var gave []GaveUp
		if gave, watchErr = in.gaveUp(ctx, svc); watchErr == nil {
			out.GaveUp = gave
		}
		if len(out.GaveUp) > 0 {
			break
		}
	}
	out.Held = time.Since(began)
	if err := unlock(context.WithoutCancel(ctx)); err != nil {
		return out, fmt.Errorf("unlock: %w", err)
	}
	if err := in.obs.waitReady(ctx, 60*time.Second); err != nil {
		return out, fmt.Errorf("after the outage: %w", err)
	}
	if gave, err := in.gaveUp(ctx, svc); err == nil && len(gave) >= len(out.GaveUp) {
		out.GaveUp = gave // what was logged as the database came back
	}
	out.DeadLetters, out.Redriven, err = in.redriveSince(ctx, svc, began)
	if len(out.GaveUp) == 0 && watchErr != nil {
		err = errors.Join(err, fmt.Errorf("reading the journal: %w", watchErr))
	}
	return out, err
}

// gaveUp reads the journal of every instance of svc for the run's orders
// (any of them: on a stack that lags, a delivery failing now may be of an
// order of a minute ago): the deliveries whose dead letter was refused or
// recorded, by consumer and event, with the highest attempt.
func (in *injector) gaveUp(ctx context.Context, svc string) ([]GaveUp, error) {
	ids, err := in.orders(ctx)
	if err != nil {
		return nil, err
	}
	found := map[[2]string]*GaveUp{}
	for _, inst := range in.obs.instances[svc] {
		for start := 0; start < len(ids); start += 200 {
			part := ids[start:min(start+200, len(ids))]
			var recs struct {
				Records []struct {
					Msg   string            `json:"msg"`
					Attrs map[string]string `json:"attrs"`
				} `json:"records"`
			}
			code, _, err := in.obs.lab.Do(ctx, inst, http.MethodGet, "/debug/journal?id="+url.QueryEscape(strings.Join(part, ",")), nil, nil, &recs)
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("%s GET /debug/journal: %d (is DEMO_MODE on?)", inst, code)
			}
			if err != nil {
				return nil, err
			}
			for _, r := range recs.Records {
				if r.Msg != logDeadLetterRefused && r.Msg != logDeadLettered {
					continue
				}
				k := [2]string{r.Attrs["consumer"], r.Attrs["event_id"]}
				g := found[k]
				if g == nil {
					g = &GaveUp{Consumer: k[0], EventID: k[1], OrderID: r.Attrs["order_id"]}
					found[k] = g
				}
				a, _ := strconv.Atoi(r.Attrs["attempt"])
				g.Attempt = max(g.Attempt, a)
				g.Recorded = g.Recorded || r.Msg == logDeadLettered
			}
		}
	}
	out := make([]GaveUp, 0, len(found))
	for _, g := range found {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b GaveUp) int { return strings.Compare(a.Consumer+a.EventID, b.Consumer+b.EventID) })
	return out, nil
}

// redriveSince redrives the dead letters svc recorded since the outage
// began, as an operator does once the database is back: republished to
// their consumer's queue with their event_id, the inbox applies each once.
func (in *injector) redriveSince(ctx context.Context, svc string, since time.Time) (recorded, redriven int, err error) {
	var dls struct {
		DeadLetters []struct {
			ID            uint64    `json:"id"`
			FirstFailedAt time.Time `json:"first_failed_at"`
			LastFailedAt  time.Time `json:"last_failed_at"`
		} `json:"dead_letters"`
	}
	if err := in.obs.lab.Get(ctx, svc, "/admin/dead-letters?status=dead&limit=1000", &dls); err != nil {
		return 0, 0, err
	}
	var ids []uint64
	for _, d := range dls.DeadLetters {
		if !d.LastFailedAt.Before(since) {
			ids = append(ids, d.ID)
		}
	}
	if len(ids) == 0 {
		return 0, 0, nil
	}
	var res struct {
		Redriven int `json:"redriven"`
	}
	code, _, err := in.obs.lab.Do(ctx, svc, http.MethodPost, "/admin/dead-letters/redrive", nil, map[string]any{"ids": ids}, &res)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("POST /admin/dead-letters/redrive: %d", code)
	}
	return len(ids), res.Redriven, err
}

// settleOutages fills in what became of each delivery that gave up during
// an outage: applied by its consumer, or a dead letter, or neither.
func (o *observer) settleOutages(ctx context.Context, recs []FaultRecord) error {
	for i := range recs {
		r := &recs[i]
		if r.Outage == nil {
			continue
		}
		for i := range r.Outage.GaveUp {
			g := &r.Outage.GaveUp[i]
			c, ok := consumerNamed(g.Consumer)
			if !ok {
				continue
			}
			applied, err := o.applied(ctx, c, []string{g.EventID})
			if err != nil {
				return err
			}
			if applied[g.EventID] > 0 {
				g.Settled = "applied"
				continue
			}
			var dls struct {
				DeadLetters []struct {
					ID uint64 `json:"id"`
				} `json:"dead_letters"`
			}
			q := "/admin/dead-letters?limit=10&consumer=" + url.QueryEscape(g.Consumer) + "&event_id=" + url.QueryEscape(g.EventID)
			if err := o.lab.Get(ctx, c.Service, q, &dls); err != nil {
				return err
			}
			if len(dls.DeadLetters) > 0 {
				g.Settled = "dead letter"
			}
		}
		settled := map[string]int{}
		for _, g := range r.Outage.GaveUp {
			settled[g.Settled]++
		}
		r.Detail += fmt.Sprintf("; at rest %d of them applied, %d dead letters, %d neither", settled["applied"], settled["dead letter"], settled[""])
	}
	return nil
}
