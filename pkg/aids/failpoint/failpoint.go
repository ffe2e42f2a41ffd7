package failpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Action is what an armed point does to the goroutine that reaches it.
type Action string

// The three actions.
const (
	ActionError Action = "error" // Inject returns an error wrapping ErrInjected
	ActionPause Action = "pause" // Inject blocks until the Gate is released
	ActionCrash Action = "crash" // the process dies with SIGKILL
)

// ErrInjected is wrapped by every error an armed point returns, so a test
// can tell the rehearsed fault from a real one.
var ErrInjected = errors.New("injected fault")

// Default is the registry Inject uses when the context carries none: the one
// FAILPOINTS and the demo endpoint arm.
var Default = NewRegistry()

// Registry holds the armed points of one process or one test. The zero value
// is ready to use; all methods are safe for concurrent use.
type Registry struct {
	// armed is len(points), read without the lock so that Inject costs one
	// atomic load while nothing is armed, which is always in production.
	armed atomic.Int32

	mu     sync.Mutex
	points map[string]*point
	hits   map[string]int // kept after Disable, so a test can read them after cleanup
}

type point struct {
	action    Action
	remaining int   // hits that still fire; -1 means every hit until disarmed
	gate      *Gate // ActionPause only
}

// fires reports whether the next hit acts. A spent or released point stays
// armed, passing hits through and counting them.
func (p *point) fires() bool {
	return p.remaining != 0 && (p.gate == nil || !p.gate.released())
}

// Status describes one armed point.
type Status struct {
	Name   string `json:"name"`
	Action Action `json:"action"`
	// Remaining is how many more hits will act; -1 means every hit until
	// disarmed, 0 means spent (hits pass through and are still counted).
	Remaining int `json:"remaining"`
	Hits      int `json:"hits"`
	Paused    int `json:"paused,omitempty"` // goroutines blocked at a pause point now
}

// NewRegistry returns an empty registry: nothing armed.
func NewRegistry() *Registry { return &Registry{} }

type ctxKey struct{}

// WithRegistry returns a context whose Inject calls use r instead of Default.
// Tests use it to arm points without touching other tests.
func WithRegistry(ctx context.Context, r *Registry) context.Context {
	return context.WithValue(ctx, ctxKey{}, r)
}

// FromContext returns the registry carried by ctx, if any.
func FromContext(ctx context.Context) (*Registry, bool) {
	r, ok := ctx.Value(ctxKey{}).(*Registry)
	return r, ok && r != nil
}

// Inject evaluates the point name in the registry carried by ctx (Default if
// none). It returns nil unless the point is armed: then it returns an error,
// blocks, or kills the process, depending on the action.
func Inject(ctx context.Context, name string) error {
	r, _ := ctx.Value(ctxKey{}).(*Registry)
	if r == nil {
		r = Default
	}
	if r.armed.Load() == 0 {
		return nil
	}
	return r.eval(ctx, name)
}

func (r *Registry) eval(ctx context.Context, name string) error {
	r.mu.Lock()
	p, ok := r.points[name]
	if !ok {
		r.mu.Unlock()
		return nil
	}
	r.hits[name]++
	if !p.fires() {
		r.mu.Unlock()
		return nil
	}
	if p.remaining > 0 {
		p.remaining--
	}
	action, gate := p.action, p.gate
	r.mu.Unlock()

	switch action {
	case ActionError:
		return fmt.Errorf("failpoint %s: %w", name, ErrInjected)
	case ActionPause:
		return gate.wait(ctx, name)
	case ActionCrash:
		crash(name)
	}
	return nil
}

// Error makes the next times hits of name return an error wrapping
// ErrInjected; times <= 0 means every hit until disarmed.
func (r *Registry) Error(name string, times int) {
	r.arm(name, &point{action: ActionError, remaining: remaining(times)})
}

// Pause makes the next times hits of name block until the returned Gate is
// released; times <= 0 means every hit until released or disarmed.
func (r *Registry) Pause(name string, times int) *Gate {
	g := newGate()
	r.arm(name, &point{action: ActionPause, remaining: remaining(times), gate: g})
	return g
}

// Crash makes the next hit of name kill the process with SIGKILL.
func (r *Registry) Crash(name string) {
	r.arm(name, &point{action: ActionCrash, remaining: 1})
}

// armAction arms name with an action parsed from FAILPOINTS or a request.
func (r *Registry) armAction(name string, a Action, count int) {
	switch a {
	case ActionError:
		r.Error(name, count)
	case ActionPause:
		r.Pause(name, count)
	case ActionCrash:
		r.Crash(name)
	}
}

func remaining(times int) int {
	if times <= 0 {
		return -1
	}
	return times
}

// arm replaces whatever name held and starts its hit count afresh. A gate it
// replaces is released first: nobody may stay blocked on a point that no
// longer exists.
func (r *Registry) arm(name string, p *point) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.points == nil {
		r.points = make(map[string]*point)
		r.hits = make(map[string]int)
	}
	if old, ok := r.points[name]; ok && old.gate != nil {
		old.gate.Release()
	}
	r.points[name] = p
	r.hits[name] = 0
	r.armed.Store(int32(len(r.points)))
}

// Disable disarms name, releasing anyone paused there. Its hit count stays
// readable until it is armed again.
func (r *Registry) Disable(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.points[name]; ok {
		if p.gate != nil {
			p.gate.Release()
		}
		delete(r.points, name)
	}
	r.armed.Store(int32(len(r.points)))
}

// DisableAll disarms every point, releasing anyone paused.
func (r *Registry) DisableAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, p := range r.points {
		if p.gate != nil {
			p.gate.Release()
		}
		delete(r.points, name)
	}
	r.armed.Store(0)
}

// Hits reports how many times Inject evaluated name while it was armed,
// counting hits that passed because the point was spent or released. Arming
// name again starts the count at zero.
func (r *Registry) Hits(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hits[name]
}

// Armed lists the armed points, sorted by name.
func (r *Registry) Armed() []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	list := make([]Status, 0, len(r.points))
	for name, p := range r.points {
		list = append(list, r.statusLocked(name, p))
	}
	slices.SortFunc(list, func(a, b Status) int { return strings.Compare(a.Name, b.Name) })
	return list
}

// release opens the gate of a paused point, for the admin API (code holds the
// Gate itself). It reports the point's status and whether it is armed; only
// a pause point is released.
func (r *Registry) release(name string) (Status, bool) { return r.lookup(name, true) }

func (r *Registry) status(name string) (Status, bool) { return r.lookup(name, false) }

// lookup is the status of an armed point, read under the lock; with
// release, a pause point's gate is opened first.
func (r *Registry) lookup(name string, release bool) (Status, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.points[name]
	if !ok {
		return Status{}, false
	}
	if release && p.gate != nil {
		p.gate.Release()
	}
	return r.statusLocked(name, p), true
}

func (r *Registry) statusLocked(name string, p *point) Status {
	s := Status{Name: name, Action: p.action, Remaining: p.remaining, Hits: r.hits[name]}
	if p.gate != nil {
		s.Paused = int(p.gate.paused.Load())
		if p.gate.released() {
			s.Remaining = 0
		}
	}
	return s
}

// crash kills the process the way a power cut or the OOM killer would: no
// deferred function runs, no buffer is flushed, no shutdown happens. That is
// the fault recovery has to survive, so nothing softer will do.
func crash(name string) {
	// One line on stderr (unbuffered) so whoever watches the demo knows the
	// death was ordered, not a bug.
	fmt.Fprintf(os.Stderr, "failpoint %s: crashing the process with SIGKILL\n", name)
	if p, err := os.FindProcess(os.Getpid()); err == nil && p.Kill() == nil {
		// The signal is on its way; run no further line of the caller.
		time.Sleep(10 * time.Second)
	}
	// No SIGKILL on this platform (or it did not arrive): exit with the
	// status a shell reports for a SIGKILLed process, 128+9.
	os.Exit(137)
}
