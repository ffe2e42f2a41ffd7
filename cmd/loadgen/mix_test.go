package main

import (
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestParseMix(t *testing.T) {
	tests := []struct {
		in      string
		want    []skuWeight
		wantErr string
	}{
		{in: "SKU-1,SKU-2", want: []skuWeight{{"SKU-1", 1}, {"SKU-2", 1}}},
		{in: " SKU-1:3 , SKU-2:0.5 ,", want: []skuWeight{{"SKU-1", 3}, {"SKU-2", 0.5}}},
		{in: "", wantErr: "names no SKU"},
		{in: "SKU-1:0", wantErr: "positive"},
		{in: "SKU-1:x", wantErr: "positive"},
		{in: "SKU-1,SKU-1", wantErr: "repeated"},
		{in: ":2", wantErr: "empty"},
	}
	for _, tt := range tests {
		got, err := parseMix(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseMix(%q) err = %v, want one containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseMix(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestGeneratorShares(t *testing.T) {
	mix := []skuWeight{{"A", 3}, {"B", 1}}
	g := &generator{mix: mix, maxLines: 1, maxQty: 3, decline: 0.1, overstock: 0.05, soldOut: "SOLD",
		rng: rand.New(rand.NewPCG(1, 2))}
	const n = 40000
	kinds := map[kind]int{}
	skus := map[string]int{}
	for i := range n {
		req, k := g.next(i)
		kinds[k]++
		if len(req.Items) != 1 {
			t.Fatalf("order %d has %d lines, want 1", i, len(req.Items))
		}
		it := req.Items[0]
		if it.Quantity < 1 || it.Quantity > 3 {
			t.Fatalf("quantity %d outside 1..3", it.Quantity)
		}
		switch k {
		case kindOverstock:
			if it.SKU != "SOLD" {
				t.Fatalf("overstock order for %s, want SOLD", it.SKU)
			}
		case kindDecline:
			if !strings.HasPrefix(req.CustomerID, "decline") {
				t.Fatalf("decline order from %q", req.CustomerID)
			}
		default:
			if strings.HasPrefix(req.CustomerID, "decline") || it.SKU == "SOLD" {
				t.Fatalf("normal order %+v", req)
			}
		}
		if k != kindOverstock {
			skus[it.SKU]++
		}
	}
	near := func(name string, got, want float64) {
		if math.Abs(got-want) > 0.01 {
			t.Errorf("%s = %.4f, want %.2f", name, got, want)
		}
	}
	near("decline share", float64(kinds[kindDecline])/n, 0.10)
	near("overstock share", float64(kinds[kindOverstock])/n, 0.05)
	near("share of A (weight 3 of 4)", float64(skus["A"])/float64(skus["A"]+skus["B"]), 0.75)
}

func TestGeneratorLinesAreDistinct(t *testing.T) {
	g := &generator{mix: []skuWeight{{"A", 1}, {"B", 1}, {"C", 1}}, maxLines: 5, maxQty: 1,
		rng: rand.New(rand.NewPCG(3, 4))}
	maxSeen := 0
	for i := range 2000 {
		req, _ := g.next(i)
		seen := map[string]bool{}
		for _, it := range req.Items {
			if seen[it.SKU] {
				t.Fatalf("order %d repeats %s: %+v", i, it.SKU, req.Items)
			}
			seen[it.SKU] = true
		}
		maxSeen = max(maxSeen, len(req.Items))
	}
	if maxSeen != 3 {
		t.Fatalf("most lines seen = %d, want 3 (capped by the mix)", maxSeen)
	}
}

// The plan covers what the orders actually take, with the margin.
func TestRestockPlanCoversDemand(t *testing.T) {
	mix := []skuWeight{{"A", 5}, {"B", 1}, {"C", 1}}
	g := &generator{mix: mix, maxLines: 2, maxQty: 2, rng: rand.New(rand.NewPCG(5, 6))}
	const n = 10000
	used := map[string]int{}
	for i := range n {
		req, _ := g.next(i)
		for _, it := range req.Items {
			used[it.SKU] += it.Quantity
		}
	}
	plan := restockPlan(mix, 2, 2, n, 1.0)
	for sku, u := range used {
		if plan[sku] < u {
			t.Errorf("plan for %s = %d, below the %d units used", sku, plan[sku], u)
		}
	}
	if plan["A"] != n*2+100 {
		t.Errorf("plan for A = %d, want %d (P capped at 1)", plan["A"], n*2+100)
	}
}
