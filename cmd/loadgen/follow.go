package main

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/wire"
)

// orderView is an order as the order API shows it.
type orderView = wire.Order

func terminal(status string) bool {
	return status == "confirmed" || status == "rejected" || status == "cancelled"
}

// tracked is one accepted order the generator waits on.
type tracked struct {
	id     uint64
	key    string
	kind   kind
	sent   time.Time // when its POST started
	status string    // last status seen
}

// listFunc is GET /orders?before=&limit=: orders with id < before, newest
// first.
type listFunc func(ctx context.Context, before uint64, limit int) ([]orderView, error)

// tracker follows accepted orders to a terminal state with list pages, not
// one GET per order. The order service lists orders newest first by id
// (one indexed range read, no order lines), so a page of 500 covers every
// order accepted in the last second or two at a few hundred per second.
// Each sweep reads pages starting just above the newest order still open
// and, after each page, jumps to the next open order below it, so old
// stragglers cost one page each, never a walk over finished ones. One sweep
// per poll interval: about one request per second at 300 orders/s, next to
// the 300 POSTs per second of the load itself.
//
// Latency does not depend on how often we look: an order's updated_at is
// set by the transaction that made it terminal (database clock), and the
// POST start is taken from the same machine's clock, so POST->terminal is
// exact to the microsecond even though the sweep sees it up to a poll
// interval later.
type tracker struct {
	list       listFunc
	pageSize   int
	onTerminal func(t *tracked, v orderView)

	mu   sync.Mutex
	open map[uint64]*tracked

	requests atomic.Int64 // list requests made
	rows     atomic.Int64 // orders read
}

func newTracker(list listFunc, pageSize int, onTerminal func(*tracked, orderView)) *tracker {
	return &tracker{list: list, pageSize: pageSize, onTerminal: onTerminal, open: map[uint64]*tracked{}}
}

func (t *tracker) add(o *tracked) {
	t.mu.Lock()
	t.open[o.id] = o
	t.mu.Unlock()
}

func (t *tracker) outstanding() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.open)
}

// pending returns the open orders, oldest first.
func (t *tracker) pending() []tracked {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]tracked, 0, len(t.open))
	for _, o := range t.open {
		out = append(out, *o)
	}
	slices.SortFunc(out, func(a, b tracked) int { return cmpUint(a.id, b.id) })
	return out
}

// sweep reads the pages that cover every open order once.
func (t *tracker) sweep(ctx context.Context) error {
	t.mu.Lock()
	ids := make([]uint64, 0, len(t.open))
	for id := range t.open {
		ids = append(ids, id)
	}
	t.mu.Unlock()
	slices.SortFunc(ids, func(a, b uint64) int { return cmpUint(b, a) }) // newest first

	i := 0
	for i < len(ids) {
		page, err := t.list(ctx, ids[i]+1, t.pageSize)
		t.requests.Add(1)
		if err != nil {
			return err
		}
		t.rows.Add(int64(len(page)))
		low := ids[i] // lowest id this page covers
		for _, v := range page {
			id, err := strconv.ParseUint(v.OrderID, 10, 64)
			if err != nil {
				continue
			}
			low = min(low, id)
			t.see(id, v)
		}
		if len(page) < t.pageSize {
			break // nothing older exists: the open orders below are gone
		}
		i = nextUncovered(ids, i, low)
	}
	return nil
}

// nextUncovered returns the index of the first id in ids (sorted newest
// first, from i) below low: the ids at or above low were in the page.
func nextUncovered(ids []uint64, i int, low uint64) int {
	for i < len(ids) && ids[i] >= low {
		i++
	}
	return i
}

func (t *tracker) see(id uint64, v orderView) {
	t.mu.Lock()
	o, ok := t.open[id]
	if ok {
		o.status = v.Status
		if terminal(v.Status) {
			delete(t.open, id)
		}
	}
	t.mu.Unlock()
	if ok && terminal(v.Status) {
		t.onTerminal(o, v)
	}
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
