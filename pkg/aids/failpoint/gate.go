package failpoint

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// Gate controls the goroutines blocked at a pause point.
type Gate struct {
	reached     chan struct{}
	reachedOnce sync.Once
	open        chan struct{}
	openOnce    sync.Once
	paused      atomic.Int32 // goroutines blocked now
}

func newGate() *Gate {
	return &Gate{reached: make(chan struct{}), open: make(chan struct{})}
}

// Reached is closed when the first goroutine blocks at the point: the test
// now knows a goroutine sits inside the window.
func (g *Gate) Reached() <-chan struct{} { return g.reached }

// Release lets every blocked goroutine go, together, and every later hit
// pass. Calling it again does nothing.
func (g *Gate) Release() { g.openOnce.Do(func() { close(g.open) }) }

func (g *Gate) released() bool {
	select {
	case <-g.open:
		return true
	default:
		return false
	}
}

// wait blocks until Release or until ctx ends, so a paused request or
// consumer still honours its deadline and shutdown.
func (g *Gate) wait(ctx context.Context, name string) error {
	g.paused.Add(1)
	defer g.paused.Add(-1)
	g.reachedOnce.Do(func() { close(g.reached) })
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("failpoint %s: paused: %w", name, ctx.Err())
	}
}
