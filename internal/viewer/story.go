package viewer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/pkg/web"
)

// story is one order as the page draws it: the order service's timeline
// (GET /admin/orders/{id}/timeline, verbatim) plus the records the timeline
// does not carry, read from the services' own endpoints:
//
//   - every outbox row's claim token, lease and next attempt
//     (/admin/outbox?aggregate_id=): the timeline has status and attempts;
//   - the payment's and refund's idempotency keys (/payments/{id});
//   - the PSP's own books: each charge and refund with its key
//     (/psp/charges?order_ref=, /psp/refunds?charge_id=);
//   - dead letters of the order's events (/admin/dead-letters, newest 200
//     per service, matched by event_id or the aggregate_id header);
//   - parked delta events (/admin/parked?state=all) and ordering gaps
//     (/admin/gaps?aggregate_id=).
//
// When the order does not exist but others acted on it (the wrong way of
// atomic-commit: its event left before its transaction rolled back), there
// is no timeline; the page draws what the other services recorded, with
// their inbox rows.
type story struct {
	OrderID     string                       `json:"order_id"`
	Order       json.RawMessage              `json:"order"`    // GET /orders/{id}; null: no such order
	Timeline    json.RawMessage              `json:"timeline"` // null when the order does not exist
	Outbox      map[string][]json.RawMessage `json:"outbox"`   // service -> rows
	Inbox       map[string][]json.RawMessage `json:"inbox,omitempty"`
	Reservation json.RawMessage              `json:"reservation"` // null: none
	Payment     json.RawMessage              `json:"payment"`     // null: none
	PSPCharges  []json.RawMessage            `json:"psp_charges"`
	PSPRefunds  []json.RawMessage            `json:"psp_refunds"`
	DeadLetters []map[string]any             `json:"dead_letters"` // each with "service"
	Parked      []map[string]any             `json:"parked"`       // each with "service"
	Gaps        []json.RawMessage            `json:"gaps"`
	Warnings    []string                     `json:"warnings"`
}

// deadLetterScan is how many of each service's newest dead letters are
// searched for the order's (the admin list has no aggregate filter).
const deadLetterScan = 200

func (s *Server) story(w http.ResponseWriter, r *http.Request) {
	raw := chi.URLParam(r, "id")
	if _, ok := web.ParseID(raw); !ok {
		web.WriteError(w, r, nil, web.Errorf(http.StatusNotFound, "order not found"))
		return
	}
	st, orderAnswer := s.gather(r.Context(), raw)
	if st.Order == nil && st.Reservation == nil && st.Payment == nil && len(st.PSPCharges) == 0 &&
		len(st.Outbox["inventory"]) == 0 && len(st.Outbox["payment"]) == 0 {
		// Nobody knows the order: the order service's answer stands.
		if orderAnswer.Err != nil {
			web.WriteError(w, r, nil, unreachable("order", orderAnswer.Err))
			return
		}
		ct := "application/json"
		if orderAnswer.Status >= 400 {
			ct = web.ProblemContentType // the services' errors are problem documents
		}
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(orderAnswer.Status)
		_, _ = w.Write(orderAnswer.Body)
		return
	}
	web.WriteJSON(w, http.StatusOK, st)
}

// gather asks every service at once. It returns the order service's answer
// to GET /orders/{id} too, to pass on when nobody knows the order.
func (s *Server) gather(ctx context.Context, id string) (*story, answer) {
	st := &story{OrderID: id, Outbox: map[string][]json.RawMessage{}, PSPCharges: []json.RawMessage{},
		PSPRefunds: []json.RawMessage{}, DeadLetters: []map[string]any{}, Parked: []map[string]any{},
		Gaps: []json.RawMessage{}, Warnings: []string{}}
	var (
		mu          sync.Mutex
		wg          sync.WaitGroup
		orderAnswer answer
		deadLetters = map[string][]map[string]any{}
	)
	warn := func(msg string) {
		mu.Lock()
		st.Warnings = append(st.Warnings, msg)
		mu.Unlock()
	}
	do := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	// record keeps a 200 answer; 404 means "none"; anything else warns.
	record := func(service, path string, into *json.RawMessage) {
		a := s.get(ctx, service, path)
		switch {
		case a.ok():
			*into = a.Body
		case a.Err == nil && a.Status == http.StatusNotFound:
		default:
			warn(a.problem(service, path))
		}
	}

	do(func() {
		orderAnswer = s.get(ctx, "order", "/orders/"+id)
		if orderAnswer.ok() {
			st.Order = orderAnswer.Body
			record("order", "/admin/orders/"+id+"/timeline", &st.Timeline)
		} else if orderAnswer.Err != nil || orderAnswer.Status != http.StatusNotFound {
			warn(orderAnswer.problem("order", "/orders/"+id))
		}
	})
	for _, svc := range []string{"order", "inventory", "payment"} {
		do(func() {
			var out struct {
				Events []json.RawMessage `json:"events"`
			}
			path := "/admin/outbox?limit=1000&aggregate_id=" + id
			if err := s.getInto(ctx, svc, path, &out); err != nil {
				warn(err.Error())
			}
			mu.Lock()
			st.Outbox[svc] = nonNil(out.Events)
			mu.Unlock()
		})
		do(func() {
			var out struct {
				DeadLetters []map[string]any `json:"dead_letters"`
			}
			if err := s.getInto(ctx, svc, fmt.Sprintf("/admin/dead-letters?limit=%d", deadLetterScan), &out); err != nil {
				warn(err.Error())
			}
			mu.Lock()
			deadLetters[svc] = out.DeadLetters
			mu.Unlock()
		})
		do(func() {
			var out struct {
				Parked []map[string]any `json:"parked"`
			}
			if err := s.getInto(ctx, svc, "/admin/parked?state=all&limit=1000", &out); err != nil {
				warn(err.Error())
			}
			mu.Lock()
			defer mu.Unlock()
			for _, p := range out.Parked {
				if fmt.Sprint(p["aggregate_id"]) == id {
					p["service"] = svc
					st.Parked = append(st.Parked, p)
				}
			}
		})
	}
	do(func() {
		var out struct {
			Gaps []json.RawMessage `json:"gaps"`
		}
		if err := s.getInto(ctx, "inventory", "/admin/gaps?aggregate_id="+id, &out); err != nil {
			warn(err.Error())
		}
		st.Gaps = nonNil(out.Gaps)
	})
	do(func() { record("inventory", "/reservations/"+id, &st.Reservation) })
	do(func() { record("payment", "/payments/"+id, &st.Payment) })
	do(func() {
		var out struct {
			Charges []json.RawMessage `json:"charges"`
		}
		if err := s.getInto(ctx, "psp", "/psp/charges?order_ref="+url.QueryEscape(id), &out); err != nil {
			warn(err.Error())
			return
		}
		st.PSPCharges = nonNil(out.Charges)
		for _, c := range out.Charges {
			var ch struct {
				ChargeID string `json:"charge_id"`
				Status   string `json:"status"`
			}
			if json.Unmarshal(c, &ch) != nil || ch.Status != "succeeded" {
				continue
			}
			var refunds struct {
				Refunds []json.RawMessage `json:"refunds"`
			}
			if err := s.getInto(ctx, "psp", "/psp/refunds?charge_id="+url.QueryEscape(ch.ChargeID), &refunds); err != nil {
				warn(err.Error())
				continue
			}
			st.PSPRefunds = append(st.PSPRefunds, refunds.Refunds...)
		}
	})
	wg.Wait()

	// The order's events, by id, select its dead letters (and, with no
	// timeline, its inbox rows).
	ids := map[string]bool{}
	var idList []string
	for _, svc := range []string{"order", "inventory", "payment"} {
		for _, row := range st.Outbox[svc] {
			var e struct {
				EventID string `json:"event_id"`
			}
			if json.Unmarshal(row, &e) == nil && e.EventID != "" && !ids[e.EventID] {
				ids[e.EventID] = true
				idList = append(idList, e.EventID)
			}
		}
	}
	for _, svc := range []string{"order", "inventory", "payment"} {
		for _, dl := range deadLetters[svc] {
			if ids[fmt.Sprint(dl["event_id"])] || headerIs(dl, "aggregate_id", id) || headerIs(dl, "correlation_id", id) {
				dl["service"] = svc
				st.DeadLetters = append(st.DeadLetters, dl)
			}
		}
	}
	if st.Timeline == nil && len(idList) > 0 {
		st.Inbox = map[string][]json.RawMessage{}
		for _, svc := range []string{"order", "inventory", "payment"} {
			do(func() {
				var out struct {
					Inbox []json.RawMessage `json:"inbox"`
				}
				path := "/admin/inbox?event_id=" + url.QueryEscape(strings.Join(idList, ","))
				if err := s.getInto(ctx, svc, path, &out); err != nil {
					warn(err.Error())
				}
				mu.Lock()
				st.Inbox[svc] = nonNil(out.Inbox)
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	return st, orderAnswer
}

// headerIs reports whether a dead letter's message header holds value.
func headerIs(dl map[string]any, header, value string) bool {
	h, ok := dl["headers"].(map[string]any)
	if !ok {
		return false
	}
	v, ok := h[header]
	if !ok {
		return false
	}
	switch n := v.(type) {
	case float64:
		return fmt.Sprintf("%.0f", n) == value
	default:
		return fmt.Sprint(n) == value
	}
}

func nonNil(rows []json.RawMessage) []json.RawMessage {
	if rows == nil {
		return []json.RawMessage{}
	}
	return rows
}
