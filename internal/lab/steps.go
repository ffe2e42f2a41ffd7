package lab

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/events"
)

// StepKind names what a Step reports.
type StepKind string

// The steps of an experiment, in the order they usually come.
const (
	StepStarted    StepKind = "started"     // the experiment began (What: its title)
	StepWrongWay   StepKind = "wrong-way"   // Service's wrong-way switches set to Switches (none: all off)
	StepArmed      StepKind = "armed"       // failpoint Point armed on Service with Action (Count calls; 0: every call)
	StepOrder      StepKind = "order"       // the experiment created order OrderID (or, What says, expects that id)
	StepHit        StepKind = "hit"         // failpoint Point on Service was reached
	StepPaused     StepKind = "paused"      // a caller is held at the pause failpoint Point
	StepReleased   StepKind = "released"    // the paused caller at Point was let go
	StepDisarmed   StepKind = "disarmed"    // failpoint Point disarmed: the fault is over
	StepCrashReady StepKind = "crash-ready" // Service runs where a crash kills a real process
	StepRestarted  StepKind = "restarted"   // Service was killed (SIGKILL) in the window and serves again
	StepPublished  StepKind = "published"   // a copy of EventID (EventType) went straight to the broker (What: as whom, if not a duplicate)
	StepBinding    StepKind = "binding"     // a binding of the broker changed (What says which)
	StepOperator   StepKind = "operator"    // the lab did what an operator or a client would (What), on Service
	StepCancel     StepKind = "cancel"      // the experiment asked to cancel OrderID
	StepWaiting    StepKind = "waiting"     // waiting for What
	StepWaited     StepKind = "waited"      // What happened, after Seconds
	StepSection    StepKind = "section"     // the evidence at one moment (Section)
	StepCheck      StepKind = "check"       // one check (Check)
	StepVerdict    StepKind = "verdict"     // the end: Passed, Verdict, Seconds
)

// Step is one thing an experiment did or saw, reported as it happens (the
// viewer's lab panel shows them live). Only the fields its kind names are
// set.
type Step struct {
	At        time.Time `json:"at"`
	Kind      StepKind  `json:"kind"`
	Service   string    `json:"service,omitempty"`
	Instances []string  `json:"instances,omitempty"` // the instances of Service a failpoint or switch was set on (armed, released, disarmed, wrong-way)
	Point     string    `json:"point,omitempty"`
	Action    string    `json:"action,omitempty"`
	Count     int       `json:"count,omitempty"`
	Switches  []string  `json:"switches,omitempty"`
	OrderID   string    `json:"order_id,omitempty"`
	EventID   string    `json:"event_id,omitempty"`
	EventType string    `json:"event_type,omitempty"`
	What      string    `json:"what,omitempty"`
	Seconds   float64   `json:"seconds,omitempty"`
	Section   *Section  `json:"section,omitempty"`
	Check     *Check    `json:"check,omitempty"`
	Passed    bool      `json:"passed,omitempty"`
	Verdict   string    `json:"verdict,omitempty"`
}

// step reports s to l.Steps, if set, stamped with the time.
func (l *Lab) step(s Step) {
	if l.Steps != nil {
		s.At = time.Now()
		l.Steps(s)
	}
}

// prepareCrash and awaitRestart are the Target's crash calls, reported.
func (l *Lab) prepareCrash(ctx context.Context, svc string) error {
	if err := l.T.PrepareCrash(ctx, svc); err != nil {
		return err
	}
	l.step(Step{Kind: StepCrashReady, Service: svc})
	return nil
}

func (l *Lab) awaitRestart(ctx context.Context, svc string) error {
	start := time.Now()
	l.step(Step{Kind: StepWaiting, Service: svc, What: svc + " to crash and come back"})
	if err := l.T.AwaitRestart(ctx, svc); err != nil {
		return err
	}
	l.step(Step{Kind: StepRestarted, Service: svc, Seconds: time.Since(start).Seconds()})
	return nil
}

// publish is Target.Publish, reported; as, if set, says who sends it (a
// duplicate otherwise).
func (l *Lab) publish(ctx context.Context, e events.Envelope, as ...string) error {
	if err := l.T.Publish(ctx, e); err != nil {
		return err
	}
	l.step(Step{Kind: StepPublished, EventID: e.EventID, EventType: e.Type, What: strings.Join(as, " ")})
	return nil
}

// bind is Binder.Bind, reported.
func (l *Lab) bind(ctx context.Context, queue, key string, bound bool) error {
	b, ok := l.T.(Binder)
	if !ok {
		return fmt.Errorf("this target cannot change the broker's bindings")
	}
	if err := b.Bind(ctx, queue, key, bound); err != nil {
		return err
	}
	what := "unbound " + queue + " from " + key + ": nothing receives " + key
	if bound {
		what = "bound " + queue + " to " + key + " again"
	}
	l.step(Step{Kind: StepBinding, Service: "rabbit", What: what})
	return nil
}
