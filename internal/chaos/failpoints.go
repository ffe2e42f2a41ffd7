package chaos

import (
	"context"
	"fmt"
	"net/http"
)

// The failpoints the faults arm on a stack in demo mode (pkg/aids/failpoint,
// /debug/failpoints): always on every instance of a service, and always
// disarmed again, by the fault or by the heal.

// arm arms point on every instance of svc: action "error" or "pause",
// count 0 for every hit.
func (o *observer) arm(ctx context.Context, svc, point, action string, count int) error {
	for _, in := range o.instances[svc] {
		code, _, err := o.lab.Do(ctx, in, http.MethodPut, "/debug/failpoints/"+point, nil,
			map[string]any{"action": action, "count": count}, nil)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("arm %s on %s: status %d (is DEMO_MODE on?)", point, in, code)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// disarm disarms point on every instance of svc, releasing whoever it
// holds; an instance that does not answer is reported, the others are
// disarmed all the same.
func (o *observer) disarm(ctx context.Context, svc, point string) error {
	var first error
	for _, in := range o.instances[svc] {
		code, _, err := o.lab.Do(ctx, in, http.MethodDelete, "/debug/failpoints/"+point, nil, nil, nil)
		if err == nil && code != http.StatusNoContent && code != http.StatusOK {
			err = fmt.Errorf("disarm %s on %s: status %d", point, in, code)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// held is how many goroutines point holds now (pause), summed over the
// instances of svc.
func (o *observer) held(ctx context.Context, svc, point string) (int, error) {
	n := 0
	for _, in := range o.instances[svc] {
		var list struct {
			Armed []struct {
				Name   string `json:"name"`
				Paused int    `json:"paused"`
			} `json:"armed"`
		}
		if err := o.lab.Get(ctx, in, "/debug/failpoints", &list); err != nil {
			return 0, err
		}
		for _, p := range list.Armed {
			if p.Name == point {
				n += p.Paused
			}
		}
	}
	return n, nil
}
