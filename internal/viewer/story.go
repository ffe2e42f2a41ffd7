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

	"github.com/relmsg/ordersaga/pkg/base/web"
	"github.com/relmsg/ordersaga/pkg/base/wire"
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
	// Queues are the saga's queues with their consumers and routing keys:
	// the page counts, at each step, the order's messages waiting in each.
	Queues []queueRoute `json:"queues"`
}

// deadLetterScan is how many of each service's newest dead letters are
// searched for the order's (the admin list has no aggregate filter).
const deadLetterScan = 200

func (s *Server) story(w http.ResponseWriter, r *http.Request) {
	raw, ok := orderParam(w, r)
	if !ok {
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

// orderParam is the route's order id; when it is not one, it answers 404
// and reports false.
func orderParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := chi.URLParam(r, "id")
	if _, ok := web.ParseID(id); !ok {
		web.WriteError(w, r, nil, web.Errorf(http.StatusNotFound, "order not found"))
		return "", false
	}
	return id, true
}

// gather asks every service at once. It returns the order service's answer
// to GET /orders/{id} too, to pass on when nobody knows the order.
func (s *Server) gather(ctx context.Context, id string) (*story, answer) {
	g := &gathering{s: s, id: id, deadLetters: map[string][]map[string]any{}, st: &story{OrderID: id,
		Outbox: map[string][]json.RawMessage{}, PSPCharges: []json.RawMessage{}, PSPRefunds: []json.RawMessage{},
		DeadLetters: []map[string]any{}, Parked: []map[string]any{}, Gaps: []json.RawMessage{}, Warnings: []string{},
		Queues: sagaQueues}}
	g.do(func() { g.order(ctx) })
	for _, svc := range storyServices {
		g.do(func() { g.outbox(ctx, svc) })
		g.do(func() { g.scanDeadLetters(ctx, svc) })
		g.do(func() { g.parked(ctx, svc) })
	}
	g.do(func() { g.gaps(ctx) })
	g.do(func() { g.record(ctx, "inventory", "/reservations/"+id, &g.st.Reservation) })
	g.do(func() { g.record(ctx, "payment", "/payments/"+id, &g.st.Payment) })
	g.do(func() { g.psp(ctx) })
	g.wg.Wait()

	// The order's events, by id, select its dead letters (and, with no
	// timeline, its inbox rows).
	idList := g.matchDeadLetters()
	if g.st.Timeline == nil && len(idList) > 0 {
		g.st.Inbox = map[string][]json.RawMessage{}
		for _, svc := range storyServices {
			g.do(func() { g.inbox(ctx, svc, idList) })
		}
		g.wg.Wait()
	}
	return g.st, g.orderAnswer
}

// storyServices are the services whose messaging tables a story reads.
var storyServices = []string{"order", "inventory", "payment"}

// gathering is one story being read: the reads run at once, each filling
// its own part of st (mu guards the shared maps and lists).
type gathering struct {
	s           *Server
	id          string
	st          *story
	mu          sync.Mutex
	wg          sync.WaitGroup
	orderAnswer answer
	deadLetters map[string][]map[string]any // service -> its newest dead letters
}

func (g *gathering) warn(msg string) {
	g.mu.Lock()
	g.st.Warnings = append(g.st.Warnings, msg)
	g.mu.Unlock()
}

func (g *gathering) do(f func()) {
	g.wg.Add(1)
	go func() { defer g.wg.Done(); f() }()
}

// record keeps a 200 answer; 404 means "none"; anything else warns.
func (g *gathering) record(ctx context.Context, service, path string, into *json.RawMessage) {
	a := g.s.get(ctx, service, path)
	switch {
	case a.ok():
		*into = a.Body
	case a.Err == nil && a.Status == http.StatusNotFound:
	default:
		g.warn(a.problem(service, path))
	}
}

// order reads the order and, when it exists, its timeline.
func (g *gathering) order(ctx context.Context) {
	g.orderAnswer = g.s.get(ctx, "order", "/orders/"+g.id)
	if g.orderAnswer.ok() {
		g.st.Order = g.orderAnswer.Body
		g.record(ctx, "order", "/admin/orders/"+g.id+"/timeline", &g.st.Timeline)
	} else if g.orderAnswer.Err != nil || g.orderAnswer.Status != http.StatusNotFound {
		g.warn(g.orderAnswer.problem("order", "/orders/"+g.id))
	}
}

// outbox reads a service's outbox rows of the order.
func (g *gathering) outbox(ctx context.Context, svc string) {
	var out struct {
		Events []json.RawMessage `json:"events"`
	}
	path := "/admin/outbox?limit=1000&aggregate_id=" + g.id
	if err := g.s.getInto(ctx, svc, path, &out); err != nil {
		g.warn(err.Error())
	}
	g.mu.Lock()
	g.st.Outbox[svc] = nonNil(out.Events)
	g.mu.Unlock()
}

// scanDeadLetters reads a service's newest dead letters, to be matched to
// the order's events once those are known.
func (g *gathering) scanDeadLetters(ctx context.Context, svc string) {
	var out struct {
		DeadLetters []map[string]any `json:"dead_letters"`
	}
	if err := g.s.getInto(ctx, svc, fmt.Sprintf("/admin/dead-letters?limit=%d", deadLetterScan), &out); err != nil {
		g.warn(err.Error())
	}
	g.mu.Lock()
	g.deadLetters[svc] = out.DeadLetters
	g.mu.Unlock()
}

// parked keeps a service's parked events of the order.
func (g *gathering) parked(ctx context.Context, svc string) {
	var out struct {
		Parked []map[string]any `json:"parked"`
	}
	if err := g.s.getInto(ctx, svc, "/admin/parked?state=all&limit=1000", &out); err != nil {
		g.warn(err.Error())
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range out.Parked {
		if fmt.Sprint(p["aggregate_id"]) == g.id {
			p["service"] = svc
			g.st.Parked = append(g.st.Parked, p)
		}
	}
}

// gaps reads inventory's ordering gaps of the order.
func (g *gathering) gaps(ctx context.Context) {
	var out struct {
		Gaps []json.RawMessage `json:"gaps"`
	}
	if err := g.s.getInto(ctx, "inventory", "/admin/gaps?aggregate_id="+g.id, &out); err != nil {
		g.warn(err.Error())
	}
	g.st.Gaps = nonNil(out.Gaps)
}

// psp reads the PSP's charges of the order, and the refunds of each
// succeeded one.
func (g *gathering) psp(ctx context.Context) {
	var out struct {
		Charges []json.RawMessage `json:"charges"`
	}
	if err := g.s.getInto(ctx, "psp", "/psp/charges?order_ref="+url.QueryEscape(g.id), &out); err != nil {
		g.warn(err.Error())
		return
	}
	g.st.PSPCharges = nonNil(out.Charges)
	for _, c := range out.Charges {
		var ch wire.Charge
		if json.Unmarshal(c, &ch) != nil || ch.Status != "succeeded" {
			continue
		}
		var refunds struct {
			Refunds []json.RawMessage `json:"refunds"`
		}
		if err := g.s.getInto(ctx, "psp", "/psp/refunds?charge_id="+url.QueryEscape(ch.ChargeID), &refunds); err != nil {
			g.warn(err.Error())
			continue
		}
		g.st.PSPRefunds = append(g.st.PSPRefunds, refunds.Refunds...)
	}
}

// matchDeadLetters keeps the dead letters of the order's events (by
// event_id, or by the aggregate_id or correlation_id header) and returns
// the order's event ids.
func (g *gathering) matchDeadLetters() []string {
	ids := map[string]bool{}
	var idList []string
	for _, svc := range storyServices {
		for _, row := range g.st.Outbox[svc] {
			var e struct {
				EventID string `json:"event_id"`
			}
			if json.Unmarshal(row, &e) == nil && e.EventID != "" && !ids[e.EventID] {
				ids[e.EventID] = true
				idList = append(idList, e.EventID)
			}
		}
	}
	for _, svc := range storyServices {
		for _, dl := range g.deadLetters[svc] {
			if ids[fmt.Sprint(dl["event_id"])] || headerIs(dl, "aggregate_id", g.id) || headerIs(dl, "correlation_id", g.id) {
				dl["service"] = svc
				g.st.DeadLetters = append(g.st.DeadLetters, dl)
			}
		}
	}
	return idList
}

// inbox reads a service's inbox rows of the order's events.
func (g *gathering) inbox(ctx context.Context, svc string, idList []string) {
	var out struct {
		Inbox []json.RawMessage `json:"inbox"`
	}
	path := "/admin/inbox?event_id=" + url.QueryEscape(strings.Join(idList, ","))
	if err := g.s.getInto(ctx, svc, path, &out); err != nil {
		g.warn(err.Error())
	}
	g.mu.Lock()
	g.st.Inbox[svc] = nonNil(out.Inbox)
	g.mu.Unlock()
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
