package chaos

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/wire"
)

// timelineJSON is GET /admin/orders/{id}/timeline: the order's history rows
// and every service's outbox rows for it are what the checks need from it.
type timelineJSON struct {
	Entries []struct {
		At      time.Time `json:"at"`
		Service string    `json:"service"`
		Kind    string    `json:"kind"`
		Detail  struct {
			From      string `json:"from"`
			To        string `json:"to"`
			Trigger   string `json:"trigger"`
			Actor     string `json:"actor"`
			EventID   string `json:"event_id"`
			EventType string `json:"event_type"`
			Version   uint64 `json:"aggregate_version"`
			Status    string `json:"status"`
			Attempts  int    `json:"attempts"`
		} `json:"detail"`
	} `json:"entries"`
	Warnings []string `json:"warnings"`
}

// order reads one order and its records in the three services. A service
// that cannot be asked is an error (the caller retries): a snapshot with a
// hole would make the checks guess.
func (o *observer) order(ctx context.Context, ord Order) (Order, error) {
	id := ord.ID

	var res wire.Reservation
	switch code, _, err := o.lab.Do(ctx, "inventory", http.MethodGet, "/reservations/"+id, nil, nil, &res); {
	case err != nil:
		return ord, err
	case code == http.StatusOK:
		ord.Reservation = &res
	case code != http.StatusNotFound:
		return ord, fmt.Errorf("GET /reservations/%s: %d", id, code)
	}

	var pay wire.Payment
	switch code, _, err := o.lab.Do(ctx, "payment", http.MethodGet, "/payments/"+id, nil, nil, &pay); {
	case err != nil:
		return ord, err
	case code == http.StatusOK:
		ord.Payment = &Payment{Status: pay.Status, AmountCents: pay.AmountCents}
		if pay.Refund != nil {
			ord.Payment.RefundStatus = pay.Refund.Status
		}
	case code != http.StatusNotFound:
		return ord, fmt.Errorf("GET /payments/%s: %d", id, code)
	}

	var charges wire.ChargeList
	if err := o.lab.Get(ctx, "psp", "/psp/charges?order_ref="+url.QueryEscape(id), &charges); err != nil {
		return ord, err
	}
	ord.Charges = []Charge{}
	for _, c := range charges.Charges {
		ch := Charge{ChargeID: c.ChargeID, Status: c.Status, AmountCents: c.AmountCents}
		if ch.Status == "succeeded" {
			var refunds wire.PSPRefundList
			if err := o.lab.Get(ctx, "psp", "/psp/refunds?charge_id="+url.QueryEscape(ch.ChargeID), &refunds); err != nil {
				return ord, err
			}
			for _, f := range refunds.Refunds {
				if f.Status == "succeeded" {
					ch.RefundedCents += f.AmountCents
				}
			}
		}
		ord.Charges = append(ord.Charges, ch)
	}

	var tl timelineJSON
	if err := o.lab.Get(ctx, "order", "/admin/orders/"+id+"/timeline", &tl); err != nil {
		return ord, err
	}
	if len(tl.Warnings) > 0 {
		return ord, fmt.Errorf("timeline of order %s: %s", id, strings.Join(tl.Warnings, "; "))
	}
	ord.History, ord.Outbox = []Change{}, []Event{}
	for _, e := range tl.Entries {
		d := e.Detail
		switch e.Kind {
		case "order.created", "order.transition":
			ord.History = append(ord.History, Change{From: d.From, To: d.To, Trigger: d.Trigger, Actor: d.Actor, EventID: d.EventID, At: e.At})
		case "outbox.written":
			ord.Outbox = append(ord.Outbox, Event{Service: e.Service, EventID: d.EventID, Type: d.EventType, Version: d.Version,
				Status: d.Status, Attempts: d.Attempts})
		}
	}
	return ord, nil
}

// orders reads the given orders with a few workers, each order up to three
// times.
func (o *observer) orders(ctx context.Context, list []Order) (map[string]Order, error) {
	out := make(map[string]Order, len(list))
	var mu sync.Mutex
	var firstErr error
	work := make(chan Order)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for base := range work {
				var ord Order
				var err error
				for try := 0; try < 3; try++ {
					if ord, err = o.order(ctx, base); err == nil {
						break
					}
					time.Sleep(time.Duration(try+1) * 300 * time.Millisecond)
				}
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("order %s: %w", base.ID, err)
				}
				out[base.ID] = ord
				mu.Unlock()
			}
		}()
	}
	for _, b := range list {
		work <- b
	}
	close(work)
	wg.Wait()
	return out, firstErr
}
