package viewer_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/relmsg/ordersaga/internal/viewer"
)

// A fake Jaeger query API: the search finds the order's trace, whose
// process span links to a batch transaction in a trace of its own. As
// Jaeger answers, a span whose parent is also its link has the
// FOLLOWS_FROM reference alone.
const (
	jaegerSearch = `{"data":[{"traceID":"aaa","spans":[
 {"traceID":"aaa","spanID":"s1","operationName":"POST /orders","references":[],"startTime":1000,"duration":900,
  "tags":[{"key":"span.kind","value":"server"}],"processID":"p1"},
 {"traceID":"aaa","spanID":"s2","operationName":"create order.created","references":[{"refType":"CHILD_OF","traceID":"aaa","spanID":"s1"}],
  "startTime":1200,"duration":100,"tags":[{"key":"messaging.operation.type","value":"create"},{"key":"messaging.message.id","value":"e-1"}],"processID":"p1"},
 {"traceID":"aaa","spanID":"s3","operationName":"process order.created:inventory.order-events",
  "references":[{"refType":"FOLLOWS_FROM","traceID":"aaa","spanID":"s2"},{"refType":"FOLLOWS_FROM","traceID":"bbb","spanID":"b1"}],
  "startTime":3000,"duration":400,"tags":[{"key":"ordersaga.outcome","value":"processed"},{"key":"otel.status_code","value":"OK"}],"processID":"p2"}],
 "processes":{"p1":{"serviceName":"order"},"p2":{"serviceName":"inventory"}}}]}`
	jaegerBatch = `{"data":[{"traceID":"bbb","spans":[
 {"traceID":"bbb","spanID":"b1","operationName":"process inventory.order-events","references":[{"refType":"FOLLOWS_FROM","traceID":"aaa","spanID":"s2"}],
  "startTime":2900,"duration":600,"tags":[{"key":"error","value":true}],"processID":"p1"}],
 "processes":{"p1":{"serviceName":"inventory"}}}]}`
)

func TestOrderTraceFromJaeger(t *testing.T) {
	t.Parallel()
	var asked []string
	jaeger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.Path)
		switch {
		case r.URL.Path == "/api/traces" && r.URL.Query().Get("service") == "order" &&
			strings.Contains(r.URL.Query().Get("tags"), `"messaging.message.conversation_id":"42"`):
			w.Write([]byte(jaegerSearch))
		case r.URL.Path == "/api/traces/bbb":
			w.Write([]byte(jaegerBatch))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(jaeger.Close)
	base := serve(t, viewer.New(viewer.Config{Token: "tok", JaegerURL: jaeger.URL, JaegerUIURL: "http://ui.example"}))

	r := call(t, "GET", base+"/api/orders/42/trace", nil, "")
	if r.status != 200 {
		t.Fatalf("GET trace: %d %s", r.status, r.body)
	}
	var v struct {
		JaegerUI string   `json:"jaeger_ui"`
		Traces   []string `json:"traces"`
		Spans    []struct {
			SpanID   string `json:"span_id"`
			ParentID string `json:"parent_id"`
			Service  string `json:"service"`
			Outcome  string `json:"outcome"`
			Linked   bool   `json:"linked"`
			Error    bool   `json:"error"`
			Links    []struct {
				TraceID string `json:"trace_id"`
			} `json:"links"`
		} `json:"spans"`
	}
	if err := json.Unmarshal([]byte(r.body), &v); err != nil {
		t.Fatal(err)
	}
	if v.JaegerUI != "http://ui.example" || len(v.Traces) != 1 || v.Traces[0] != "aaa" || len(v.Spans) != 4 {
		t.Fatalf("view %+v: want the UI link, trace aaa and its 3 spans plus the linked batch span", v)
	}
	got := map[string]int{}
	for i, s := range v.Spans {
		got[s.SpanID] = i
	}
	process, batch := v.Spans[got["s3"]], v.Spans[got["b1"]]
	if process.ParentID != "s2" || process.Service != "inventory" || process.Outcome != "processed" || process.Error ||
		len(process.Links) != 2 || process.Links[1].TraceID != "bbb" {
		t.Errorf("process span %+v: want parent s2, inventory, processed, links to s2 and to the batch b1", process)
	}
	if !batch.Linked || !batch.Error {
		t.Errorf("batch span %+v: want it marked linked (fetched by following a link) and failed", batch)
	}
	if v.Spans[0].SpanID != "s1" {
		t.Errorf("first span %s: want the spans in time order", v.Spans[0].SpanID)
	}

	off := serve(t, viewer.New(viewer.Config{Token: "tok"}))
	if r := call(t, "GET", off+"/api/orders/42/trace", nil, ""); r.status != 404 || !strings.Contains(r.body, "--tracing") {
		t.Errorf("without JAEGER_URL: %d %s, want 404 saying how to turn tracing on", r.status, r.body)
	}
}
