package wrongway

import "context"

// Alt is a wrong way of doing something, taken while its switch is on.
type Alt[F any] struct {
	Switch Switch
	Way    F
}

// Pick returns how a component chooses its way each time it acts: the Way
// of the first of alts whose switch is on, else right. Components are
// wired with a picker where a process is composed (pkg/process and each
// service's run), the right way holding no trace of the wrong ones; with
// no switch set, or no alternates, the picker always answers right.
//
// This is the one place where the lab's wrong ways are chosen at run time
// (the demo endpoint flips switches while the process runs), so that an
// experiment can run the wrong way and the right way one after the other.
func Pick[F any](s *Set, right F, alts ...Alt[F]) func() F {
	if s == nil || len(alts) == 0 {
		return func() F { return right }
	}
	return func() F {
		for _, a := range alts {
			if s.On(a.Switch) {
				return a.Way
			}
		}
		return right
	}
}

// Route is Pick for a handler of events (a store S and an event E): a
// handler that takes, at each call, the way Pick chooses.
func Route[S, E any](s *Set, right func(context.Context, S, E) error, alts ...Alt[func(context.Context, S, E) error]) func(context.Context, S, E) error {
	pick := Pick(s, right, alts...)
	return func(ctx context.Context, st S, e E) error { return pick()(ctx, st, e) }
}
