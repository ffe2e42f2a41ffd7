package failpoint_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
)

// Real point names, so the same names work in FAILPOINTS and HTTP tests.
const (
	claim   = "outbox.dispatch.after-claim"
	mark    = "outbox.dispatch.after-confirm-before-mark"
	effect  = "inbox.after-effect-before-commit"
	ackGone = "inbox.after-commit-before-ack"
)

func newCtx(t *testing.T) (context.Context, *failpoint.Registry) {
	t.Helper()
	r := failpoint.NewRegistry()
	t.Cleanup(r.DisableAll) // never leave a goroutine paused behind
	return failpoint.WithRegistry(t.Context(), r), r
}

func TestInjectDisarmedReturnsNil(t *testing.T) {
	ctx, r := newCtx(t)
	if err := failpoint.Inject(ctx, claim); err != nil {
		t.Fatalf("Inject with nothing armed: got %v, want nil", err)
	}
	r.Error(mark, 0)
	if err := failpoint.Inject(ctx, claim); err != nil {
		t.Fatalf("Inject of a point that is not armed while another is: got %v, want nil", err)
	}
	if got := r.Hits(claim); got != 0 {
		t.Fatalf("Hits of a point never armed: got %d, want 0", got)
	}
}

func TestErrorTimes(t *testing.T) {
	tests := []struct {
		name  string
		times int
		hits  int
		want  string // per hit: E = error, . = nil
	}{
		{"once", 1, 4, "E..."},
		{"three times", 3, 5, "EEE.."},
		{"zero means every hit", 0, 4, "EEEE"},
		{"negative means every hit", -2, 3, "EEE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, r := newCtx(t)
			r.Error(effect, tt.times)
			var got strings.Builder
			for range tt.hits {
				err := failpoint.Inject(ctx, effect)
				switch {
				case err == nil:
					got.WriteByte('.')
				case errors.Is(err, failpoint.ErrInjected) && strings.Contains(err.Error(), effect):
					got.WriteByte('E')
				default:
					t.Fatalf("Inject: got %v, want an error wrapping ErrInjected naming %s", err, effect)
				}
			}
			if got.String() != tt.want {
				t.Errorf("hits: got %s, want %s", got.String(), tt.want)
			}
			if got := r.Hits(effect); got != tt.hits {
				t.Errorf("Hits: got %d, want %d", got, tt.hits)
			}
		})
	}
}

func TestDisable(t *testing.T) {
	ctx, r := newCtx(t)
	r.Error(claim, 0)
	r.Error(mark, 0)
	_ = failpoint.Inject(ctx, claim)

	r.Disable(claim)
	if err := failpoint.Inject(ctx, claim); err != nil {
		t.Fatalf("Inject after Disable: got %v, want nil", err)
	}
	if got := r.Hits(claim); got != 1 {
		t.Errorf("Hits after Disable: got %d, want 1 (the count outlives Disable)", got)
	}
	if err := failpoint.Inject(ctx, mark); !errors.Is(err, failpoint.ErrInjected) {
		t.Fatalf("Disable(claim) touched %s: got %v, want ErrInjected", mark, err)
	}

	r.DisableAll()
	if err := failpoint.Inject(ctx, mark); err != nil {
		t.Fatalf("Inject after DisableAll: got %v, want nil", err)
	}
	if got := r.Armed(); len(got) != 0 {
		t.Fatalf("Armed after DisableAll: got %v, want none", got)
	}

	r.Error(claim, 1)
	if got := r.Hits(claim); got != 0 {
		t.Errorf("Hits after re-arming: got %d, want 0", got)
	}
}

func TestArmed(t *testing.T) {
	ctx, r := newCtx(t)
	r.Error(mark, 2)
	r.Pause(claim, 0)
	r.Crash(ackGone)
	r.Error(effect, 1)
	_ = failpoint.Inject(ctx, mark)
	_ = failpoint.Inject(ctx, effect)
	_ = failpoint.Inject(ctx, effect) // spent: passes, still counted

	got := r.Armed()
	want := []failpoint.Status{
		{Name: ackGone, Action: failpoint.ActionCrash, Remaining: 1, Hits: 0},
		{Name: effect, Action: failpoint.ActionError, Remaining: 0, Hits: 2},
		{Name: claim, Action: failpoint.ActionPause, Remaining: -1, Hits: 0},
		{Name: mark, Action: failpoint.ActionError, Remaining: 1, Hits: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("Armed: got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Armed()[%d]: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// waitPaused waits until n goroutines sit at the pause point name.
func waitPaused(t *testing.T, r *failpoint.Registry, name string, n int) {
	t.Helper()
	testutil.WaitFor(t, 5*time.Second, fmt.Sprintf("%d goroutines paused at %s", n, name), func() bool {
		for _, s := range r.Armed() {
			if s.Name == name && s.Paused == n {
				return true
			}
		}
		return false
	})
}

func TestPauseReleasesEveryoneTogether(t *testing.T) {
	ctx, r := newCtx(t)
	const n = 8
	gate := r.Pause(claim, 0)

	errc := make(chan error, n)
	for range n {
		go func() { errc <- failpoint.Inject(ctx, claim) }()
	}
	select {
	case <-gate.Reached():
	case <-time.After(5 * time.Second):
		t.Fatal("Reached not closed although goroutines hit the point")
	}
	waitPaused(t, r, claim, n)
	select {
	case err := <-errc:
		t.Fatalf("a goroutine passed a pause before Release: %v", err)
	default:
	}

	gate.Release()
	gate.Release() // idempotent
	for range n {
		if err := <-errc; err != nil {
			t.Errorf("released Inject: got %v, want nil", err)
		}
	}
	if err := failpoint.Inject(ctx, claim); err != nil {
		t.Errorf("Inject after Release: got %v, want nil (later hits pass)", err)
	}
	if got := r.Hits(claim); got != n+1 {
		t.Errorf("Hits: got %d, want %d", got, n+1)
	}
}

func TestPauseTimes(t *testing.T) {
	ctx, r := newCtx(t)
	gate := r.Pause(claim, 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if err := failpoint.Inject(ctx, claim); err != nil {
				t.Errorf("paused Inject: got %v, want nil after Release", err)
			}
		})
	}
	waitPaused(t, r, claim, 2)
	// The third hit is beyond times: it passes at once.
	if err := failpoint.Inject(ctx, claim); err != nil {
		t.Fatalf("third hit: got %v, want nil", err)
	}
	gate.Release()
	wg.Wait()
}

func TestPauseHonoursContext(t *testing.T) {
	ctx, r := newCtx(t)
	gate := r.Pause(effect, 0)
	ctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- failpoint.Inject(ctx, effect) }()
	<-gate.Reached()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("paused Inject after cancel: got %v, want context.Canceled", err)
	}
	waitPaused(t, r, effect, 0)
}

func TestDisableReleasesPaused(t *testing.T) {
	ctx, r := newCtx(t)
	gate := r.Pause(mark, 0)
	errc := make(chan error, 1)
	go func() { errc <- failpoint.Inject(ctx, mark) }()
	<-gate.Reached()
	r.Disable(mark)
	if err := <-errc; err != nil {
		t.Fatalf("paused Inject after Disable: got %v, want nil", err)
	}
}

// Two parallel tests arm the same name on their own registries; neither sees
// the other's, and Default sees neither.
func TestRegistryInContextIsIsolated(t *testing.T) {
	tests := []struct {
		name  string
		times int // 0: every hit
		want  int // errors over 100 hits
	}{
		{"every hit", 0, 100},
		{"three hits", 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, r := newCtx(t)
			r.Error(mark, tt.times)
			got := 0
			for range 100 {
				if failpoint.Inject(ctx, mark) != nil {
					got++
				}
				if err := failpoint.Inject(context.Background(), mark); err != nil {
					t.Fatalf("Default saw a point armed on a test registry: %v", err)
				}
			}
			if got != tt.want {
				t.Errorf("errors: got %d, want %d", got, tt.want)
			}
			if got := r.Hits(mark); got != 100 {
				t.Errorf("Hits: got %d, want 100", got)
			}
		})
	}
}

// Not parallel: it arms Default, which the process shares.
func TestInjectFallsBackToDefault(t *testing.T) {
	failpoint.Default.Error(ackGone, 1)
	t.Cleanup(func() { failpoint.Default.Disable(ackGone) })
	if err := failpoint.Inject(context.Background(), ackGone); !errors.Is(err, failpoint.ErrInjected) {
		t.Fatalf("Inject without a registry in ctx: got %v, want ErrInjected from Default", err)
	}
	ctx := failpoint.WithRegistry(context.Background(), failpoint.NewRegistry())
	failpoint.Default.Error(ackGone, 0)
	if err := failpoint.Inject(ctx, ackGone); err != nil {
		t.Fatalf("Inject with its own registry: got %v, want nil (Default ignored)", err)
	}
}

func TestInjectDisarmedDoesNotAllocate(t *testing.T) {
	ctx := failpoint.WithRegistry(context.Background(), failpoint.NewRegistry())
	for name, ctx := range map[string]context.Context{"context registry": ctx, "default": context.Background()} {
		got := testing.AllocsPerRun(1000, func() { _ = failpoint.Inject(ctx, mark) })
		if got != 0 {
			t.Errorf("%s: allocs per disarmed Inject: got %v, want 0", name, got)
		}
	}
}

func BenchmarkInjectDisarmed(b *testing.B) {
	b.Run("default", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			_ = failpoint.Inject(ctx, mark)
		}
	})
	b.Run("context registry", func(b *testing.B) {
		ctx := failpoint.WithRegistry(context.Background(), failpoint.NewRegistry())
		b.ReportAllocs()
		for b.Loop() {
			_ = failpoint.Inject(ctx, mark)
		}
	})
}

// For comparison: once anything is armed, every Inject takes the lock.
func BenchmarkInjectOtherPointArmed(b *testing.B) {
	r := failpoint.NewRegistry()
	r.Error(claim, 0)
	ctx := failpoint.WithRegistry(context.Background(), r)
	b.ReportAllocs()
	for b.Loop() {
		_ = failpoint.Inject(ctx, mark)
	}
}
