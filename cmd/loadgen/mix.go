package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/relmsg/ordersaga/pkg/base/wire"
)

// skuWeight is one SKU of the mix and its relative weight.
type skuWeight struct {
	SKU    string  `json:"sku"`
	Weight float64 `json:"weight"`
}

// parseMix reads "SKU-1:3,SKU-2,SKU-4:0.5" (weight 1 when omitted).
func parseMix(s string) ([]skuWeight, error) {
	var out []skuWeight
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		sku, w, hasW := strings.Cut(part, ":")
		weight := 1.0
		if hasW {
			var err error
			weight, err = strconv.ParseFloat(w, 64)
			if err != nil || weight <= 0 || math.IsInf(weight, 0) {
				return nil, fmt.Errorf("sku mix %q: weight of %s must be a positive number", s, sku)
			}
		}
		if sku == "" || seen[sku] {
			return nil, fmt.Errorf("sku mix %q: empty or repeated SKU %q", s, sku)
		}
		seen[sku] = true
		out = append(out, skuWeight{SKU: sku, Weight: weight})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("sku mix %q names no SKU", s)
	}
	return out, nil
}

// kind is what the load generator expects an order to end as.
type kind string

const (
	kindNormal    kind = "normal"    // expected confirmed
	kindDecline   kind = "decline"   // customer "decline-...": expected cancelled
	kindOverstock kind = "overstock" // SKU-SOLDOUT: expected rejected
)

func (k kind) expected() string {
	switch k {
	case kindDecline:
		return "cancelled"
	case kindOverstock:
		return "rejected"
	default:
		return "confirmed"
	}
}

// A create request and its lines, as the order API reads them.
type (
	line         = wire.OrderLine
	orderRequest = wire.CreateOrderRequest
)

// generator makes the order bodies: 1..maxLines distinct SKUs drawn by
// weight, quantities 1..maxQty, a share of declines and of orders for a
// SKU that has no stock.
type generator struct {
	mix       []skuWeight
	maxLines  int
	maxQty    int
	decline   float64 // share of orders from a declined customer
	overstock float64 // share of orders for soldOut
	soldOut   string
	rng       *rand.Rand
}

func (g *generator) next(i int) (orderRequest, kind) {
	r := g.rng.Float64()
	switch {
	case r < g.overstock:
		return orderRequest{CustomerID: fmt.Sprintf("lg-c-%d", i%1000),
			Items: []line{{SKU: g.soldOut, Quantity: 1}}}, kindOverstock
	case r < g.overstock+g.decline:
		return orderRequest{CustomerID: fmt.Sprintf("decline-lg-%d", i%1000), Items: g.lines()}, kindDecline
	default:
		return orderRequest{CustomerID: fmt.Sprintf("lg-c-%d", i%1000), Items: g.lines()}, kindNormal
	}
}

func (g *generator) lines() []line {
	n := 1 + g.rng.IntN(min(g.maxLines, len(g.mix)))
	// Weighted draw without replacement.
	left := append([]skuWeight(nil), g.mix...)
	out := make([]line, 0, n)
	for range n {
		total := 0.0
		for _, s := range left {
			total += s.Weight
		}
		x := g.rng.Float64() * total
		pick := len(left) - 1
		for j, s := range left {
			if x < s.Weight {
				pick = j
				break
			}
			x -= s.Weight
		}
		out = append(out, line{SKU: left[pick].SKU, Quantity: 1 + g.rng.IntN(g.maxQty)})
		left = append(left[:pick], left[pick+1:]...)
	}
	return out
}

// restockPlan is how many units of each SKU to receive before a run of n
// orders so that no order is rejected for lack of stock: an upper bound of
// what n orders can take (every order could hold each SKU at most once, at
// most maxQty units), times margin, from the chance that an order holds it.
func restockPlan(mix []skuWeight, maxLines, maxQty, n int, margin float64) map[string]int {
	total := 0.0
	for _, s := range mix {
		total += s.Weight
	}
	lines := min(maxLines, len(mix))
	out := map[string]int{}
	for _, s := range mix {
		// P(SKU in order) <= lines * weight / total (a union bound), <= 1.
		p := math.Min(1, float64(lines)*s.Weight/total)
		out[s.SKU] = int(math.Ceil(float64(n)*p*float64(maxQty)*margin)) + 100
	}
	return out
}
