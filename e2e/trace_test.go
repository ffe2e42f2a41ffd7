package e2e

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/relmsg/ordersaga/internal/sagatest"
	"github.com/relmsg/ordersaga/pkg/tracing"
)

// One order is one trace across the three services and the PSP
// (docs/tracing.md): the POST's server span, a create span for every event
// its outbox rows hold, a send span per publish, a process span per
// delivery, each child of and linked to its producer's create span, and a
// settle span per decision. A redelivered copy is a second process span
// settled "duplicate"; a failed attempt is a process span settled "retry"
// and the next attempt a process span of its own.
func TestOneOrderIsOneConnectedTrace(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	s := sagatest.StartWithSpans(t, spans)
	// Inventory commits order.created and loses its ack: the broker
	// redelivers it, the inbox finds it processed. Payment's first attempt
	// at inventory.reserved fails after its inbox claim: a delayed retry.
	s.Inventory.Failpoints.Error("inbox.after-commit-before-ack", 1)
	s.Payment.Failpoints.Error("inbox.after-claim", 1)

	caller := fmt.Sprintf("00-%016x%016x-%016x-01", rand.Uint64(), rand.Uint64(), rand.Uint64()|1)
	traceID := tracing.Parse(caller).TraceID()
	var o orderJSON
	body := map[string]any{"customer_id": "c-trace", "items": []map[string]any{{"sku": "SKU-1", "quantity": 1}}}
	if code := s.Order.Do("POST", "/orders", map[string]string{"Idempotency-Key": "trace-1", tracing.Header: caller}, body, &o); code != 202 {
		t.Fatalf("POST /orders: %d", code)
	}
	waitStatus(t, s, o.OrderID, "confirmed")

	// The saga's deliveries on the happy path and how each was settled:
	// the order.created inventory committed was not acked (abandoned),
	// its redelivery was a duplicate; payment's first attempt at
	// inventory.reserved was retried, its second processed.
	want := map[string][]string{
		"order.created:inventory.order-events":          {"abandoned", "duplicate"},
		"inventory.reserved:order.saga-results":         {"processed"},
		"inventory.reserved:payment.saga-events":        {"retry", "processed"},
		"payment.charge-requested:payment.psp-commands": {"processed"},
		"payment.succeeded:order.saga-results":          {"processed"},
		"order.confirmed:inventory.order-events":        {"processed"},
	}
	complete := func(tr orderTrace) bool {
		for key, outcomes := range want {
			for _, o := range outcomes {
				if tr.settled(key, o) != 1 {
					return false
				}
			}
		}
		return true
	}
	tr := traceOf(spans.GetSpans(), traceID)
	for deadline := time.Now().Add(20 * time.Second); !complete(tr); tr = traceOf(spans.GetSpans(), traceID) {
		if time.Now().After(deadline) {
			t.Fatalf("after 20s, not every delivery of the order has its process and settle spans:\n%s", tr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if problems := tr.check(tracing.Parse(caller).SpanID()); len(problems) > 0 {
		t.Fatalf("the order's trace is not connected:\n%s\n\nspans:\n%s", strings.Join(problems, "\n"), tr)
	}
	// The duplicate is a second process span of the same message, linked
	// to the same create span; the retry a process span per attempt.
	for key, n := range map[string]int{"order.created:inventory.order-events": 2, "inventory.reserved:payment.saga-events": 2} {
		if got := len(tr.processOf(key)); got != n {
			t.Errorf("%s: %d process spans, want %d\n%s", key, got, n, tr)
		}
	}
	if got := tr.services(); !slices.Equal(got, []string{"inventory", "order", "payment-fake", "psp"}) {
		t.Errorf("the trace's spans come from %v, want the three services and the PSP", got)
	}
	for _, svc := range []*sagatest.Service{s.Order, s.Inventory, s.Payment} {
		if !strings.Contains(svc.Logs(), `"trace_id":"`+traceID.String()+`"`) {
			t.Errorf("%s never logged trace_id %s", svc.Name, traceID)
		}
	}
}

// The check above fails when one link of the chain is missing: a process
// span that neither links to nor descends from its producer's create span.
func TestTheTraceCheckFindsABrokenLink(t *testing.T) {
	creation := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: 1})
	root := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{3}, TraceFlags: 1})
	msg := attribute.String("messaging.message.id", "e-1")
	good := tracetest.SpanStubs{
		{Name: "POST /orders", SpanKind: trace.SpanKindServer, SpanContext: root},
		{Name: "create order.created", SpanKind: trace.SpanKindProducer, SpanContext: creation, Parent: root,
			Attributes: []attribute.KeyValue{msg, attribute.String("messaging.operation.type", "create")}},
		{Name: "process order.created:q", SpanKind: trace.SpanKindConsumer, Parent: creation,
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{4}}),
			Links:       []sdktrace.Link{{SpanContext: creation}},
			Attributes:  []attribute.KeyValue{msg, attribute.String("messaging.operation.type", "process")}},
	}
	if p := traceOf(good, trace.TraceID{1}).check(trace.SpanID{}); len(p) > 0 {
		t.Fatalf("a connected trace was refused: %v", p)
	}
	broken := slices.Clone(good)
	broken[2].Links = nil
	if p := traceOf(broken, trace.TraceID{1}).check(trace.SpanID{}); len(p) == 0 {
		t.Fatal("a process span without its link to the create span was accepted")
	}
	orphan := slices.Clone(good)
	orphan[2].Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{9}})
	if p := traceOf(orphan, trace.TraceID{1}).check(trace.SpanID{}); len(p) == 0 {
		t.Fatal("a process span whose parent is not in the trace was accepted")
	}
}

// orderTrace is the spans of one trace.
type orderTrace struct{ spans tracetest.SpanStubs }

func traceOf(all tracetest.SpanStubs, id trace.TraceID) orderTrace {
	var tr orderTrace
	for _, s := range all {
		if s.SpanContext.TraceID() == id {
			tr.spans = append(tr.spans, s)
		}
	}
	return tr
}

func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

func op(s tracetest.SpanStub) string { return attr(s, "messaging.operation.type") }

// processOf returns the process spans of a delivery key, "routing
// key:queue" (the queue without the test's namespace).
func (tr orderTrace) processOf(key string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range tr.spans {
		if op(s) == "process" && s.SpanKind == trace.SpanKindConsumer && deliveryKey(s) == key {
			out = append(out, s)
		}
	}
	return out
}

// deliveryKey is a process span's "routing key:queue", namespace dropped.
func deliveryKey(s tracetest.SpanStub) string {
	queue := attr(s, "messaging.destination.name")
	queue = queue[strings.LastIndex(queue, ":")+1:]
	if i := strings.Index(queue, "."); i >= 0 && strings.HasPrefix(queue, "t-") {
		queue = queue[i+1:]
	}
	return attr(s, "messaging.rabbitmq.destination.routing_key") + ":" + queue
}

// settled counts the settle spans with outcome under the process spans of
// a delivery key.
func (tr orderTrace) settled(key, outcome string) int {
	n := 0
	for _, p := range tr.processOf(key) {
		for _, s := range tr.spans {
			if op(s) == "settle" && s.Parent.SpanID() == p.SpanContext.SpanID() && attr(s, "ordersaga.outcome") == outcome {
				n++
			}
		}
	}
	return n
}

// check lists what breaks the chain: a span whose parent is not in the
// trace (but the caller's, callerSpan), a process or send span that does
// not link to the create span of its message, or descend from it.
func (tr orderTrace) check(callerSpan trace.SpanID) []string {
	byID := map[trace.SpanID]tracetest.SpanStub{}
	creates := map[string]trace.SpanID{} // message id -> create span
	for _, s := range tr.spans {
		byID[s.SpanContext.SpanID()] = s
		if op(s) == "create" {
			creates[attr(s, "messaging.message.id")] = s.SpanContext.SpanID()
		}
	}
	var problems []string
	for _, s := range tr.spans {
		if p := s.Parent.SpanID(); p.IsValid() && p != callerSpan {
			if _, ok := byID[p]; !ok {
				problems = append(problems, fmt.Sprintf("%s: parent %s is not in the trace", s.Name, p))
			}
		}
		if o := op(s); o == "process" || o == "send" {
			create, ok := creates[attr(s, "messaging.message.id")]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: no create span for message %s", s.Name, attr(s, "messaging.message.id")))
				continue
			}
			if !slices.ContainsFunc(s.Links, func(l sdktrace.Link) bool { return l.SpanContext.SpanID() == create }) {
				problems = append(problems, fmt.Sprintf("%s: no link to its create span %s", s.Name, create))
			}
			if s.Parent.SpanID() != create {
				problems = append(problems, fmt.Sprintf("%s: parent %s, not its create span %s", s.Name, s.Parent.SpanID(), create))
			}
		}
	}
	return problems
}

// services are the service names of the trace's spans, sorted.
func (tr orderTrace) services() []string {
	var out []string
	for _, s := range tr.spans {
		if s.Resource == nil {
			continue
		}
		if v, ok := s.Resource.Set().Value("service.name"); ok && !slices.Contains(out, v.AsString()) {
			out = append(out, v.AsString())
		}
	}
	slices.Sort(out)
	return out
}

func (tr orderTrace) String() string {
	var b strings.Builder
	for _, s := range tr.spans {
		fmt.Fprintf(&b, "%s %-60s parent=%s links=%d key=%s outcome=%s\n", s.SpanContext.SpanID(), s.Name, s.Parent.SpanID(),
			len(s.Links), deliveryKey(s), attr(s, "ordersaga.outcome"))
	}
	return b.String()
}
