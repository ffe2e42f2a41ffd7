package lab

import (
	"context"
	"fmt"
	"net/http"

	"github.com/relmsg/ordersaga/pkg/base/events"
)

// Failpoints, wrong-way switches and metrics: arming and releasing a
// fault in every instance of a service, and reading what it hit.

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

// trap is a failpoint an experiment sends an order into: Action at Point
// of Service, Count times (0: until released). Wait names, for the
// progress line, what reaching it means.
type trap struct {
	Service, Point, Action string
	Count                  int
	Wait                   string
}

// orderInto arms the trap, places an order for qty of sku under key and
// waits until the order's path reaches the trap (and is held there, for a
// pause). It returns the order and its OrderCreated outbox row.
func (l *Lab) orderInto(ctx context.Context, tp trap, key, sku string, qty int) (Order, OutboxRow, error) {
	if err := l.arm(ctx, tp.Service, tp.Point, tp.Action, tp.Count); err != nil {
		return Order{}, OutboxRow{}, err
	}
	o, err := l.placeOrder(ctx, key, sku, qty)
	if err != nil {
		return o, OutboxRow{}, err
	}
	wait := l.waitHit
	if tp.Action == "pause" {
		wait = l.waitPaused
	}
	if err := wait(ctx, tp.Wait, tp.Service, tp.Point); err != nil {
		return o, OutboxRow{}, err
	}
	created, err := l.outboxEvent(ctx, "order", o.OrderID, events.OrderCreated)
	return o, created, err
}
