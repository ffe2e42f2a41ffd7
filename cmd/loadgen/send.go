package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Sending: the open loop on its timetable, the closed loop of -workers
// clients, and one POST /orders with what its answer says.

// openLoop sends on the timetable until it is done or ctx ends, then waits
// for the answers of the requests in flight.
func (r *runner) openLoop(ctx context.Context, start time.Time) {
	s := schedule{start: start, rate: r.cfg.rate, count: r.cfg.count}
	if r.cfg.duration > 0 {
		s.end = start.Add(r.cfg.duration)
	}
	slots := make(chan struct{}, r.cfg.maxInflight)
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := 0; !s.done(i); {
		for due := s.due(time.Now()); i < due; i++ {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			lag := time.Since(s.at(i))
			if lag > r.cfg.late {
				r.late.Add(1)
			}
			for {
				old := r.maxLag.Load()
				if int64(lag) <= old || r.maxLag.CompareAndSwap(old, int64(lag)) {
					break
				}
			}
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				defer func() { <-slots }()
				r.post(ctx, i)
			}(i)
		}
		if s.done(i) {
			break
		}
		timer.Reset(time.Until(s.at(i)))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
	}
}

// closedLoop runs N clients, each sending its next order once the last one
// is answered, until the count or the duration is reached.
func (r *runner) closedLoop(ctx context.Context, start time.Time) {
	var next atomic.Int64
	var wg sync.WaitGroup
	end := time.Time{}
	if r.cfg.duration > 0 {
		end = start.Add(r.cfg.duration)
	}
	for range r.cfg.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && (end.IsZero() || time.Now().Before(end)) {
				i := int(next.Add(1) - 1)
				if r.cfg.count > 0 && i >= r.cfg.count {
					return
				}
				r.post(ctx, i)
			}
		}()
	}
	wg.Wait()
}

// post creates order i and records the answer.
func (r *runner) post(ctx context.Context, i int) {
	r.genMu.Lock()
	body, k := r.gen.next(i)
	r.genMu.Unlock()
	b, _ := json.Marshal(body)
	key := fmt.Sprintf("%s-%d", r.cfg.keyPrefix, i)

	r.sent.Add(1)
	r.inflight.Add(1)
	defer r.inflight.Add(-1)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.cfg.orderURL+"/orders", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	start := time.Now()
	resp, err := r.client.Do(req)
	if err != nil {
		r.addErr(classify(ctx, err))
		return
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err != nil {
		r.addErr("read_body")
		return
	}
	if resp.StatusCode != http.StatusAccepted {
		r.addErr(fmt.Sprintf("http_%d", resp.StatusCode))
		return
	}
	var v orderView
	if err := json.Unmarshal(data, &v); err != nil {
		r.addErr("decode")
		return
	}
	id, err := strconv.ParseUint(v.OrderID, 10, 64)
	if err != nil {
		r.addErr("decode")
		return
	}
	r.accepted.Add(1)
	r.postAccepted.add(took)
	// POST->terminal uses the server's updated_at against our clock: check
	// that the two agree (created_at must fall inside the request).
	if v.CreatedAt.Before(start.Add(-5*time.Millisecond)) || v.CreatedAt.After(start.Add(took+5*time.Millisecond)) {
		r.clockOdd.Add(1)
	}
	o := &tracked{id: id, key: key, kind: k, sent: start, status: v.Status}
	if terminal(v.Status) { // an idempotent replay of a finished order
		r.onTerminal(o, v)
		return
	}
	if r.cfg.follow == "list" {
		r.tracker.add(o)
	}
}

func classify(ctx context.Context, err error) string {
	var ne net.Error
	switch {
	case ctx.Err() != nil:
		return "interrupted"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection_refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection_reset"
	default:
		return "transport"
	}
}
