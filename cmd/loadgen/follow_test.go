package main

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"
)

// fakeOrders is the order service's list endpoint over a map.
type fakeOrders struct {
	status map[uint64]string
	calls  []uint64 // before of each call
}

func (f *fakeOrders) list(_ context.Context, before uint64, limit int) ([]orderView, error) {
	f.calls = append(f.calls, before)
	var ids []uint64
	for id := range f.status {
		if id < before {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b uint64) int { return cmpUint(b, a) })
	var out []orderView
	for _, id := range ids[:min(limit, len(ids))] {
		out = append(out, orderView{OrderID: strconv.FormatUint(id, 10), Status: f.status[id],
			UpdatedAt: t0.Add(time.Duration(id) * time.Millisecond)})
	}
	return out, nil
}

func TestSweepJumpsOverFinishedOrders(t *testing.T) {
	f := &fakeOrders{status: map[uint64]string{}}
	for id := uint64(1); id <= 10000; id++ {
		f.status[id] = "confirmed"
	}
	open := []uint64{9999, 9990, 9500, 5000, 12}
	for _, id := range open {
		f.status[id] = "awaiting_payment"
	}
	f.status[5000] = "rejected"
	var done []uint64
	tr := newTracker(f.list, 100, func(o *tracked, v orderView) { done = append(done, o.id) })
	for _, id := range open {
		tr.add(&tracked{id: id, sent: t0})
	}
	if err := tr.sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	// One page from just above the newest open order covers 9999 and 9990;
	// then one page each for 9500, 5000 and 12.
	if want := []uint64{10000, 9501, 5001, 13}; !slices.Equal(f.calls, want) {
		t.Errorf("list calls (before) = %v, want %v", f.calls, want)
	}
	if !slices.Equal(done, []uint64{5000}) {
		t.Errorf("terminal = %v, want [5000]", done)
	}
	if got := tr.outstanding(); got != 4 {
		t.Errorf("outstanding = %d, want 4", got)
	}
	p := tr.pending()
	if len(p) != 4 || p[0].id != 12 || p[0].status != "awaiting_payment" {
		t.Errorf("pending = %+v, want 4 oldest first with their last status", p)
	}

	for _, id := range open {
		f.status[id] = "cancelled"
	}
	f.calls = nil
	if err := tr.sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if tr.outstanding() != 0 || len(done) != 5 {
		t.Errorf("after all finished: outstanding %d, terminal %d; want 0 and 5", tr.outstanding(), len(done))
	}
	f.calls = nil
	if err := tr.sweep(context.Background()); err != nil || len(f.calls) != 0 {
		t.Errorf("sweep with nothing open made %d calls (err %v), want none", len(f.calls), err)
	}
}

// An open order that the list does not return (a short last page) ends the
// sweep instead of looping.
func TestSweepStopsAtTheOldestOrder(t *testing.T) {
	f := &fakeOrders{status: map[uint64]string{50: "pending_inventory"}}
	tr := newTracker(f.list, 10, func(*tracked, orderView) {})
	tr.add(&tracked{id: 50})
	tr.add(&tracked{id: 7}) // unknown to the service
	if err := tr.sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(f.calls) != 1 {
		t.Errorf("calls = %v, want one (the short page covers id 7)", f.calls)
	}
}

func TestNextUncovered(t *testing.T) {
	ids := []uint64{100, 90, 80, 10}
	tests := []struct {
		i    int
		low  uint64
		want int
	}{
		{0, 100, 1},
		{0, 85, 2},
		{0, 1, 4},
		{2, 80, 3},
		{3, 11, 3},
	}
	for _, tt := range tests {
		if got := nextUncovered(ids, tt.i, tt.low); got != tt.want {
			t.Errorf("nextUncovered(%v, %d, %d) = %d, want %d", ids, tt.i, tt.low, got, tt.want)
		}
	}
}
