package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// The SKUs the load uses (the inventory and order migrations seed them).
const (
	ScarceSKU  = "SKU-LIMITED" // raced by a wave of orders; restocked a few units per wave
	SoldOutSKU = "SKU-SOLDOUT" // never has stock: its orders are rejected
)

// plentySKUs are restocked before the run so that happy orders never run
// out. Their prices keep an order of at most two lines of two units far
// below the PSP's amount limit.
var plentySKUs = []string{"SKU-1", "SKU-2", "SKU-3", "SKU-4"}

// Load shapes the mixed load.
type Load struct {
	Rate       float64       `json:"rate"`        // orders per second, open loop
	Duration   time.Duration `json:"duration_ns"` // how long the load and the faults run
	WaveSize   int           `json:"wave_size"`   // scarce orders released together in one wave
	WaveSupply int           `json:"wave_supply"` // units of the scarce SKU received before each wave
}

// mix is the share of each non-scarce kind; scarce orders come in waves.
var mix = []struct {
	kind  Kind
	share float64
}{
	{KindHappy, 0.40}, {KindInsufficient, 0.08}, {KindDecline, 0.12}, {KindCancel, 0.15}, {KindReplay, 0.15}, {KindConflict, 0.10},
}

// Plan is one run decided in advance from the seed: every request (kind,
// body, timing of its cancel or replay), the scarce waves and the faults.
// The same seed gives the same plan; the stack's answers vary.
type Plan struct {
	Seed     uint64           `json:"seed"`
	Requests []PlannedRequest `json:"-"`
	Waves    []Wave           `json:"waves"`
	Faults   []Fault          `json:"faults"`
}

// PlannedRequest is one idempotency key of the load.
type PlannedRequest struct {
	At    time.Duration // when its first POST goes out, from the start
	Index int
	Kind  Kind
	Items []Line
	// CancelAfter: a cancel request's cancel goes this long after the
	// create was accepted (0: at once, racing the saga).
	CancelAfter time.Duration
	// Concurrent: a replay's copies sent together with the first POST.
	Concurrent int
	// Later: when a replay sends its key again, or a conflict sends its key
	// with another body, after the create was accepted.
	Later time.Duration
	Wave  int // scarce: the wave it belongs to
}

// Wave is a burst of scarce orders released together, after Supply units
// of the scarce SKU were received.
type Wave struct {
	At     time.Duration `json:"at_ns"`
	Supply int           `json:"supply"`
	Orders int           `json:"orders"`
}

// NewPlan draws the load and the fault schedule of a run.
func NewPlan(seed uint64, load Load, faults FaultSchedule) Plan {
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	p := Plan{Seed: seed}
	n := int(load.Rate * load.Duration.Seconds())
	for i := range n {
		at := time.Duration(float64(i) / load.Rate * float64(time.Second))
		p.Requests = append(p.Requests, plannedRequest(rng, at))
	}
	// Waves: one per 20 s of load, at least one, away from the ends.
	waves := max(1, int(load.Duration/(20*time.Second)))
	for w := range waves {
		at := load.Duration * time.Duration(2*w+1) / time.Duration(2*waves)
		p.Waves = append(p.Waves, Wave{At: at, Supply: load.WaveSupply, Orders: load.WaveSize})
		for range load.WaveSize {
			p.Requests = append(p.Requests, PlannedRequest{At: at, Kind: KindScarce, Wave: w,
				Items: []Line{{SKU: ScarceSKU, Quantity: 1}}})
		}
	}
	slices.SortStableFunc(p.Requests, func(a, b PlannedRequest) int { return int(a.At - b.At) })
	for i := range p.Requests {
		p.Requests[i].Index = i
	}
	p.Faults = faults.draw(rng, load.Duration)
	return p
}

func plannedRequest(rng *rand.Rand, at time.Duration) PlannedRequest {
	x := rng.Float64()
	kind := KindHappy
	for _, m := range mix {
		if x < m.share {
			kind = m.kind
			break
		}
		x -= m.share
	}
	r := PlannedRequest{At: at, Kind: kind, Items: plentyLines(rng)}
	switch kind {
	case KindInsufficient:
		// All or none: the plentiful line must not be held either.
		r.Items = []Line{{SKU: SoldOutSKU, Quantity: 1}, r.Items[0]}
	case KindCancel:
		// A third at once (racing the reservation and the charge), the
		// rest at random moments up to two seconds later.
		if rng.IntN(3) > 0 {
			r.CancelAfter = time.Duration(rng.Int64N(int64(2 * time.Second)))
		}
	case KindReplay:
		r.Concurrent = 1 + rng.IntN(3)
		r.Later = time.Duration(500+rng.IntN(4500)) * time.Millisecond
	case KindConflict:
		r.Later = time.Duration(rng.IntN(3000)) * time.Millisecond
	}
	return r
}

// plentyLines draws one or two distinct plentiful SKUs, one or two units each.
func plentyLines(rng *rand.Rand) []Line {
	skus := slices.Clone(plentySKUs)
	rng.Shuffle(len(skus), func(i, j int) { skus[i], skus[j] = skus[j], skus[i] })
	lines := make([]Line, 1+rng.IntN(2))
	for i := range lines {
		lines[i] = Line{SKU: skus[i], Quantity: 1 + rng.IntN(2)}
	}
	return lines
}

// conflicting is another body for the same key: one more unit on the
// first line.
func conflicting(items []Line) []Line {
	out := slices.Clone(items)
	out[0].Quantity++
	return out
}

// Customer is the customer id of request i of a run: one customer per
// key, so that the orders stored for a key can be listed by customer. The
// PSP declines customers whose id starts with "decline".
func Customer(tag string, i int, kind Kind) string {
	c := fmt.Sprintf("chaos-%s-%05d", tag, i)
	if kind == KindDecline {
		return "decline-" + c
	}
	return c
}

// Key is the idempotency key of request i of a run.
func Key(tag string, i int) string { return fmt.Sprintf("chaos-%s-%05d", tag, i) }

// restock is how many units of each plentiful SKU the run can take at
// most: every planned line, one more unit per line (a conflicting body asks
// one more), and a margin.
func (p Plan) restock() map[string]int {
	out := map[string]int{}
	for _, r := range p.Requests {
		for _, l := range r.Items {
			if slices.Contains(plentySKUs, l.SKU) {
				out[l.SKU] += l.Quantity + 1 // +1: a conflicting body may ask one more
			}
		}
	}
	for sku, n := range out {
		out[sku] = n + 50
	}
	return out
}

// FaultSchedule says which faults a run injects, how often, and on what.
type FaultSchedule struct {
	Kinds []FaultKind
	Every time.Duration // one fault per Every of the load, kinds in turn
	// Instances are the processes kill and stop take turns on ("order",
	// "order-2", ...); the three services when empty. Run fills it from
	// the stack.
	Instances []string
	// Nodes are the broker's nodes a cluster's broker-restart takes turns
	// on; none for a broker of one node. Run fills it from the stack.
	Nodes []string
	// Script, when set, is the faults to inject, as they are, instead of
	// drawn ones: a test that must hit given targets at given moments.
	Script []Fault
}

// kinds are the kinds the schedule injects.
func (fs FaultSchedule) kinds() []FaultKind {
	if len(fs.Script) == 0 {
		return fs.Kinds
	}
	var out []FaultKind
	for _, f := range fs.Script {
		if !slices.Contains(out, f.Kind) {
			out = append(out, f.Kind)
		}
	}
	return out
}

// Fault is one planned fault.
type Fault struct {
	At     time.Duration `json:"at_ns"` // planned start, from the start of the run
	Kind   FaultKind     `json:"kind"`
	Target string        `json:"target"`            // the instance, the service, the node ("leader": of the busiest queue), or the PSP's mode
	Hold   time.Duration `json:"hold_ns,omitempty"` // stop, broker-restart, db-lock: how long it lasts
	Count  int           `json:"count,omitempty"`   // psp: how many calls it affects
}

func (f Fault) String() string {
	s := fmt.Sprintf("%s %s", f.Kind, f.Target)
	if f.Hold > 0 {
		s += " for " + round(f.Hold).String()
	}
	if f.Count > 0 {
		s += fmt.Sprintf(" x%d", f.Count)
	}
	return strings.TrimSpace(s)
}

// draw spreads the faults over the load: one per Every, starting after a
// short lead, each kind in turn (a fresh shuffle per round), targets and
// holds drawn from rng. Each one starts a second before the load ends at
// the latest; the runner may push it later (see Run).
func (fs FaultSchedule) draw(rng *rand.Rand, d time.Duration) []Fault {
	if len(fs.Script) > 0 {
		return slices.Clone(fs.Script)
	}
	if len(fs.Kinds) == 0 || fs.Every <= 0 {
		return nil
	}
	lead := min(3*time.Second, d/10)
	var out []Fault
	var turn []FaultKind
	instances := fs.Instances
	if len(instances) == 0 {
		instances = Services
	}
	svcTurn := rng.IntN(len(Services))
	nodeTurn, killTurn := 0, 0
	slow := map[FaultKind]bool{}
	for at := lead; ; at += fs.Every {
		if len(turn) == 0 {
			turn = slices.DeleteFunc(slices.Clone(fs.Kinds), func(k FaultKind) bool { return slow[k] })
			if len(turn) == 0 {
				break
			}
			rng.Shuffle(len(turn), func(i, j int) { turn[i], turn[j] = turn[j], turn[i] })
		}
		f := Fault{Kind: turn[0], At: at + time.Duration(rng.Int64N(int64(fs.Every/4)+1))}
		switch f.Kind {
		case FaultKill, FaultStop:
			f.Target = instances[svcTurn%len(instances)]
			svcTurn++
		case FaultDBKill:
			f.Target = Services[svcTurn%len(Services)]
			svcTurn++
		case FaultBrokerRestart:
			f.Target = "all"
			if len(fs.Nodes) > 0 {
				f.Target = fs.Nodes[nodeTurn%len(fs.Nodes)]
				nodeTurn++
			}
		case FaultNodeKill:
			// A retry in flight first, then the busiest queue's leader, in turn.
			f.Target = []string{"retry:inventory", "leader"}[killTurn%2]
			killTurn++
		case FaultCopyTake:
			f.Target = "all"
		case FaultDBOutage:
			// payment: its orders may wait ten minutes (PAYMENT_DEADLINE);
			// inventory's two (PARTICIPANT_DEADLINE) are too close to the
			// outage and the return of the deliveries that gave up, and the
			// order service's answers to clients would be 5xx.
			f.Target, f.Hold = "payment", outageCap
			slow[f.Kind] = true
		case FaultDBLock:
			f.Target = "all"
		case FaultBrokerClose:
			f.Target = "stack"
		case FaultPSP:
			f.Target = pspModes[rng.IntN(len(pspModes))]
			f.Count = 1 + rng.IntN(3)
		}
		switch f.Kind {
		case FaultStop, FaultBrokerRestart:
			f.Hold = time.Duration(1000+rng.IntN(2000)) * time.Millisecond
		case FaultDBLock:
			f.Hold = time.Duration(1000+rng.IntN(1000)) * time.Millisecond
		}
		if f.At > d-time.Second {
			break
		}
		turn = turn[1:]
		out = append(out, f)
	}
	return slowLast(out)
}

// slowLast moves the slow faults to the end of the plan, the moments kept
// in order: faults run one after the other, and one behind an outage of a
// minute or more would find the load over, with no traffic to act on.
func slowLast(fs []Fault) []Fault {
	at := make([]time.Duration, len(fs))
	for i, f := range fs {
		at[i] = f.At
	}
	slices.SortStableFunc(fs, func(a, b Fault) int {
		sa, sb := slices.Contains(SlowFaultKinds, a.Kind), slices.Contains(SlowFaultKinds, b.Kind)
		switch {
		case sa == sb:
			return 0
		case sa:
			return 1
		}
		return -1
	})
	for i := range fs {
		fs[i].At = at[i]
	}
	return fs
}
