package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
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
