package viewer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/web"
)

// The order's traces, from Jaeger's query API (JAEGER_URL; scripts/up.sh
// --tracing, docker compose): every trace with a span of the order
// service whose messaging.message.conversation_id is the order id (the
// POST that created it, a cancel, a sweep's decision), and the traces
// their spans link to (a consumer batch's transaction), one level deep.
// The page draws them on a time axis next to the timeline (trace.js);
// docs/tracing.md says what each span is.

// traceView is what the page draws.
type traceView struct {
	OrderID  string      `json:"order_id"`
	JaegerUI string      `json:"jaeger_ui,omitempty"` // JAEGER_UI_URL: open a trace in Jaeger's own UI
	Traces   []string    `json:"traces"`              // the order's own, oldest first
	Spans    []traceSpan `json:"spans"`
}

// traceSpan is one span, reduced to what the drawing needs.
type traceSpan struct {
	TraceID  string      `json:"trace_id"`
	SpanID   string      `json:"span_id"`
	ParentID string      `json:"parent_id,omitempty"`
	Service  string      `json:"service"`
	Name     string      `json:"name"`
	Kind     string      `json:"kind,omitempty"`      // server, producer, consumer, client, internal
	Op       string      `json:"operation,omitempty"` // messaging.operation.type
	Start    int64       `json:"start_us"`            // microseconds since the epoch
	Duration int64       `json:"duration_us"`
	Error    bool        `json:"error,omitempty"`
	Outcome  string      `json:"outcome,omitempty"` // ordersaga.outcome of a process or settle span
	Message  string      `json:"message_id,omitempty"`
	Links    []traceLink `json:"links,omitempty"`
	Linked   bool        `json:"linked,omitempty"` // in a trace the order's spans link to
}

type traceLink struct {
	TraceID string `json:"trace_id"`
	SpanID  string `json:"span_id"`
}

// jaegerTraces is the query API's answer (GET /api/traces...).
type jaegerTraces struct {
	Data []struct {
		TraceID   string                   `json:"traceID"`
		Spans     []jaegerSpan             `json:"spans"`
		Processes map[string]jaegerProcess `json:"processes"`
	} `json:"data"`
}

type jaegerSpan struct {
	TraceID    string `json:"traceID"`
	SpanID     string `json:"spanID"`
	Operation  string `json:"operationName"`
	References []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64 `json:"startTime"`
	Duration  int64 `json:"duration"`
	Tags      []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
	ProcessID string `json:"processID"`
}

type jaegerProcess struct {
	ServiceName string `json:"serviceName"`
}

// maxLinkedTraces bounds the traces fetched because a span links to them.
const maxLinkedTraces = 8

func (s *Server) orderTrace(w http.ResponseWriter, r *http.Request) {
	id, ok := orderParam(w, r)
	if !ok {
		return
	}
	if s.cfg.JaegerURL == "" {
		web.WriteError(w, r, nil, web.Errorf(http.StatusNotFound,
			"tracing is off: start the stack with scripts/up.sh --tracing (or docker compose) to see traces"))
		return
	}
	tags, _ := json.Marshal(map[string]string{"messaging.message.conversation_id": id})
	q := url.Values{"service": {"order"}, "tags": {string(tags)}, "limit": {"20"},
		"start": {strconv.FormatInt(s.orderSince(r.Context(), id).UnixMicro(), 10)},
		"end":   {strconv.FormatInt(time.Now().Add(time.Minute).UnixMicro(), 10)}}
	found, err := s.jaeger(r.Context(), "/api/traces?"+q.Encode())
	if err != nil {
		web.WriteError(w, r, nil, unreachable("jaeger", err))
		return
	}
	view := traceView{OrderID: id, JaegerUI: s.cfg.JaegerUIURL, Traces: []string{}, Spans: []traceSpan{}}
	seen := map[string]bool{}
	add := func(jt jaegerTraces, linked bool) {
		for _, t := range jt.Data {
			if seen[t.TraceID] {
				continue
			}
			seen[t.TraceID] = true
			if !linked {
				view.Traces = append(view.Traces, t.TraceID)
			}
			view.Spans = append(view.Spans, reduce(t.Spans, t.Processes, linked)...)
		}
	}
	add(found, false)
	// Follow the links out of the order's traces, one level.
	var more []string
	for _, sp := range view.Spans {
		for _, l := range sp.Links {
			if !seen[l.TraceID] && !slices.Contains(more, l.TraceID) && len(more) < maxLinkedTraces {
				more = append(more, l.TraceID)
			}
		}
	}
	for _, tid := range more {
		if jt, err := s.jaeger(r.Context(), "/api/traces/"+url.PathEscape(tid)); err == nil {
			add(jt, true)
		}
	}
	slices.SortStableFunc(view.Spans, func(a, b traceSpan) int { return int(a.Start - b.Start) })
	web.WriteJSON(w, http.StatusOK, view)
}

// orderSince is when to search from: a little before the order was
// created, so that an order id used again after the schemas were dropped
// (a new stack, the same Jaeger) does not bring the old order's traces;
// a day back when the order service does not say.
func (s *Server) orderSince(ctx context.Context, id string) time.Time {
	since := time.Now().Add(-24 * time.Hour)
	if s.cfg.Target == nil {
		return since
	}
	a := s.get(ctx, "order", "/orders/"+id)
	var o struct {
		CreatedAt time.Time `json:"created_at"`
	}
	if a.ok() && json.Unmarshal(a.Body, &o) == nil && !o.CreatedAt.IsZero() {
		return o.CreatedAt.Add(-5 * time.Second)
	}
	return since
}

// reduce turns the query API's spans into traceSpans. A reference to a
// span of another trace, or a FOLLOWS_FROM (how the query API shows an
// OpenTelemetry link), is a link; the first CHILD_OF is the parent. A span
// whose parent is also its link (a process span and its create span) comes
// with the FOLLOWS_FROM alone: then that span of its own trace is the
// parent, and a link too.
func reduce(in []jaegerSpan, procs map[string]jaegerProcess, linked bool) []traceSpan {
	out := make([]traceSpan, 0, len(in))
	for _, sp := range in {
		ts := traceSpan{TraceID: sp.TraceID, SpanID: sp.SpanID, Name: sp.Operation, Start: sp.StartTime,
			Duration: sp.Duration, Service: procs[sp.ProcessID].ServiceName, Linked: linked}
		for _, ref := range sp.References {
			if ref.RefType == "CHILD_OF" && ts.ParentID == "" && ref.TraceID == sp.TraceID {
				ts.ParentID = ref.SpanID
				continue
			}
			ts.Links = append(ts.Links, traceLink{TraceID: ref.TraceID, SpanID: ref.SpanID})
		}
		for _, l := range ts.Links {
			if ts.ParentID == "" && l.TraceID == sp.TraceID {
				ts.ParentID = l.SpanID
			}
		}
		for _, tag := range sp.Tags {
			v := fmt.Sprint(tag.Value)
			switch tag.Key {
			case "span.kind":
				ts.Kind = v
			case "messaging.operation.type":
				ts.Op = v
			case "ordersaga.outcome":
				ts.Outcome = v
			case "messaging.message.id":
				ts.Message = v
			case "error", "otel.status_code":
				ts.Error = ts.Error || v == "true" || v == "ERROR"
			}
		}
		out = append(out, ts)
	}
	return out
}

// jaeger asks Jaeger's query API and decodes its answer.
func (s *Server) jaeger(ctx context.Context, path string) (jaegerTraces, error) {
	var jt jaegerTraces
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.JaegerURL+path, nil)
	if err != nil {
		return jt, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return jt, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return jt, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	err = json.NewDecoder(resp.Body).Decode(&jt)
	return jt, err
}
