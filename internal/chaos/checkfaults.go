package chaos

import (
	"fmt"
	"strings"
)

// CheckFaults is the check of what the faults themselves reached: a fault
// that did not reach its path proves nothing, and a process that exited
// with no fault killing it is a crash.
const CheckFaults = "faults"

// faults checks each fault's record and every instance's processes.
func (c *checker) faults() {
	kills := map[string]int{}
	for _, f := range c.s.Faults {
		subject := fmt.Sprintf("fault %s at +%s", f.Kind, round(f.Started))
		switch {
		case f.Kind == FaultKill && f.Error == "":
			kills[f.Target]++
		case f.Kind == FaultCopyTake:
			c.copyTakes(f, subject)
		case f.Kind == FaultNodeKill && strings.HasPrefix(f.Target, "retry:"):
			if r := f.Retry; r == nil || r.Waiting == 0 || f.Error != "" {
				c.add(CheckFaults, "retry-in-flight", subject, "no retry was waiting in the tier whose leader it killed%s", suffix(f.Error))
			}
		case f.Kind == FaultDBOutage:
			c.outage(f, subject)
		}
	}
	for _, in := range sortedKeys(c.s.Processes) {
		if n := c.s.Processes[in] - 1; n > kills[in] {
			c.add(CheckFaults, "restart", "instance "+in, "started again %d times, killed by %d faults: it exited by itself", n, kills[in])
		}
	}
}

func (c *checker) copyTakes(f FaultRecord, subject string) {
	done := map[string]bool{}
	for _, t := range f.CopyTakes {
		done[t.Consumer] = true
		switch {
		case !t.Seen:
			c.add(CheckFaults, "copy-take", subject, "%s: its %d copies of %s were not seen in one take", t.Consumer, t.Copies, t.EventID)
		case t.Applied != 1:
			c.add(CheckFaults, "copy-take", subject, "%s: %s applied %d times after its copies, want once", t.Consumer, t.EventID, t.Applied)
		}
	}
	var missed []string
	for _, k := range Consumers {
		if !done[k.Name] {
			missed = append(missed, k.Name)
		}
	}
	if len(missed) > 0 || f.Error != "" {
		c.add(CheckFaults, "copy-take", subject, "not carried out at %s%s", orNone(strings.Join(missed, ", ")), suffix(f.Error))
	}
}

func (c *checker) outage(f FaultRecord, subject string) {
	o := f.Outage
	if o == nil || len(o.GaveUp) == 0 {
		c.add(CheckFaults, "give-up", subject, "no delivery reached its give-up during the outage: it proved nothing%s", suffix(f.Error))
		return
	}
	for _, g := range o.GaveUp {
		if g.Settled == "" {
			c.add(CheckFaults, "give-up", subject, "%s gave up on %s (order %s) at attempt %d, which is neither applied nor a dead letter at rest: lost",
				g.Consumer, g.EventID, g.OrderID, g.Attempt)
		}
	}
	if o.Redriven < o.DeadLetters {
		c.add(CheckFaults, "give-up", subject, "%d dead letters recorded during the outage, %d redriven", o.DeadLetters, o.Redriven)
	}
}
