package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/relmsg/ordersaga/docs"
	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// asyncAPIURL names docs/asyncapi.yaml as a schema resource.
const asyncAPIURL = "file:///docs/asyncapi.yaml"

// Message is one message of docs/asyncapi.yaml: an event type at one
// schema version.
type Message struct {
	Key     string // components/messages key: "<type>.v<version>"
	Type    string // the message's name: the event type and routing key
	Version int    // its schema_version
	headers *jsonschema.Schema
	payload *jsonschema.Schema
}

// Messages is every message of docs/asyncapi.yaml with its compiled
// header and payload schemas, and the AMQP properties every message has.
type Messages struct {
	byType map[string]map[int]*Message
	props  *jsonschema.Schema
}

var (
	messagesOnce sync.Once
	messages     *Messages
	messagesErr  error
)

// AsyncAPI returns the messages of docs/asyncapi.yaml, compiled once.
func AsyncAPI() (*Messages, error) {
	messagesOnce.Do(func() { messages, messagesErr = compileMessages() })
	return messages, messagesErr
}

func compileMessages() (*Messages, error) {
	doc, err := raw(docs.AsyncAPI)
	if err != nil {
		return nil, fmt.Errorf("read docs/asyncapi.yaml: %w", err)
	}
	j, _ := json.Marshal(doc)
	res, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	// The AsyncAPI schema format is a superset of JSON Schema draft-07.
	c.DefaultDraft(jsonschema.Draft7)
	c.AssertFormat()
	if err := c.AddResource(asyncAPIURL, res); err != nil {
		return nil, err
	}
	compile := func(ref string) (*jsonschema.Schema, error) {
		if !strings.HasPrefix(ref, "#/") {
			return nil, fmt.Errorf("reference %q: only references inside asyncapi.yaml are read", ref)
		}
		return c.Compile(asyncAPIURL + ref)
	}
	m := &Messages{byType: map[string]map[int]*Message{}}
	if m.props, err = compile("#/components/schemas/AmqpProperties"); err != nil {
		return nil, err
	}
	msgs, _ := dig(doc, "components", "messages").(map[string]any)
	for key, v := range msgs {
		def, _ := v.(map[string]any)
		name, _ := def["name"].(string)
		ver, ok := strings.CutPrefix(key, name+".v")
		n, err := strconv.Atoi(ver)
		if name == "" || !ok || err != nil {
			return nil, fmt.Errorf("message %q: its key must be <name>.v<schema_version>", key)
		}
		msg := &Message{Key: key, Type: name, Version: n}
		if msg.headers, err = compile(refOf(def["headers"])); err != nil {
			return nil, fmt.Errorf("message %s headers: %w", key, err)
		}
		if msg.payload, err = compile(refOf(def["payload"])); err != nil {
			return nil, fmt.Errorf("message %s payload: %w", key, err)
		}
		if m.byType[name] == nil {
			m.byType[name] = map[int]*Message{}
		}
		m.byType[name][n] = msg
	}
	return m, nil
}

// Types lists the event types the document describes, sorted.
func (m *Messages) Types() []string {
	out := make([]string, 0, len(m.byType))
	for t := range m.byType {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Versions lists the schema versions of one event type, sorted.
func (m *Messages) Versions(typ string) []int {
	var out []int
	for v := range m.byType[typ] {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// CheckDelivery validates one message as the broker delivered it: its
// AMQP properties, then its headers and payload against the message of
// its type and schema_version. A type or version the document does not
// describe is an error.
func (m *Messages) CheckDelivery(d amqp.Delivery) error {
	props := map[string]any{
		"message_id": d.MessageId, "type": d.Type, "content_type": d.ContentType,
		"delivery_mode": int64(d.DeliveryMode), "timestamp": d.Timestamp.UTC().Format(time.RFC3339),
	}
	if d.Timestamp.IsZero() {
		delete(props, "timestamp")
	}
	if err := validate(m.props, props); err != nil {
		return fmt.Errorf("AMQP properties: %w", err)
	}
	if d.RoutingKey != "" && d.RoutingKey != d.Type {
		return fmt.Errorf("routing key %q is not the type %q", d.RoutingKey, d.Type)
	}
	return m.Check(d.Type, d.Headers, d.Body)
}

// Check validates headers and payload against the message of type typ at
// the headers' schema_version.
func (m *Messages) Check(typ string, headers amqp.Table, body []byte) error {
	versions, ok := m.byType[typ]
	if !ok {
		return fmt.Errorf("event type %q is not described by docs/asyncapi.yaml", typ)
	}
	v64, ok := rabbit.IntHeader(headers, events.HeaderSchemaVersion)
	if !ok {
		return fmt.Errorf("%s: header schema_version missing or not an integer (%T)", typ, headers[events.HeaderSchemaVersion])
	}
	v := int(v64)
	msg, ok := versions[v]
	if !ok {
		return fmt.Errorf("%s schema_version %d is not described by docs/asyncapi.yaml (it has %v)", typ, v, m.Versions(typ))
	}
	if err := validate(msg.headers, tableJSON(headers)); err != nil {
		return fmt.Errorf("%s headers: %w", msg.Key, err)
	}
	payload, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s payload is not JSON: %w", msg.Key, err)
	}
	if err := msg.payload.Validate(payload); err != nil {
		return fmt.Errorf("%s payload %s: %w", msg.Key, body, err)
	}
	return nil
}

// validate checks a Go value by its JSON form.
func validate(s *jsonschema.Schema, v any) error {
	j, err := json.Marshal(v)
	if err != nil {
		return err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		return err
	}
	return s.Validate(doc)
}

// tableJSON is an AMQP table as JSON values: integers stay integers, times
// become RFC 3339 text, byte strings text.
func tableJSON(t amqp.Table) map[string]any {
	out := make(map[string]any, len(t))
	for k, v := range t {
		switch x := v.(type) {
		case time.Time:
			out[k] = x.UTC().Format(time.RFC3339)
		case []byte:
			out[k] = string(x)
		case amqp.Table:
			out[k] = tableJSON(x)
		default:
			out[k] = v
		}
	}
	return out
}

// Queue is a consumer queue as docs/asyncapi.yaml declares it.
type Queue struct {
	Name      string
	Keys      []string       // the routing keys bound to it: its messages' types, sorted
	Arguments map[string]any // x-arguments of its binding
}

// Queues returns the consumer queues of docs/asyncapi.yaml, by name: the
// channels bound as queues whose address is a name, not a pattern.
func Queues() (map[string]Queue, error) {
	doc, err := raw(docs.AsyncAPI)
	if err != nil {
		return nil, err
	}
	out := map[string]Queue{}
	chans, _ := dig(doc, "channels").(map[string]any)
	for _, v := range chans {
		ch, _ := v.(map[string]any)
		addr, _ := ch["address"].(string)
		if dig(ch, "bindings", "amqp", "is") != "queue" || strings.Contains(addr, "{") {
			continue
		}
		q := Queue{Name: addr}
		q.Arguments, _ = dig(ch, "bindings", "amqp", "queue", "x-arguments").(map[string]any)
		msgs, _ := ch["messages"].(map[string]any)
		for _, mv := range msgs {
			ref := refOf(mv)
			def, _ := dig(doc, strings.Split(strings.TrimPrefix(ref, "#/"), "/")...).(map[string]any)
			name, _ := def["name"].(string)
			if name == "" {
				return nil, fmt.Errorf("queue %s: message %q has no name", addr, ref)
			}
			if !slices.Contains(q.Keys, name) {
				q.Keys = append(q.Keys, name)
			}
		}
		sort.Strings(q.Keys)
		out[addr] = q
	}
	if len(out) == 0 {
		return nil, errors.New("docs/asyncapi.yaml declares no queue")
	}
	return out, nil
}

// dig walks nested maps by keys; nil when a step is missing.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func refOf(v any) string {
	s, _ := dig(v, "$ref").(string)
	return s
}

// TopologyMismatches compares a service's topology (its bindings package,
// declared with the empty namespace) with docs/asyncapi.yaml: the
// exchanges, and for each queue its routing keys. The queues' arguments
// are pkg/rabbit's (QueueArguments), compared there.
func TopologyMismatches(topo rabbit.Topology) ([]string, error) {
	queues, err := Queues()
	if err != nil {
		return nil, err
	}
	var out []string
	if topo.Exchange != "saga.events" || topo.DeadLetterExchange != "saga.dlx" {
		out = append(out, fmt.Sprintf("exchanges %q and %q, the document has saga.events and saga.dlx", topo.Exchange, topo.DeadLetterExchange))
	}
	for _, q := range topo.Queues {
		doc, ok := queues[q.Name]
		if !ok {
			out = append(out, fmt.Sprintf("queue %s is not in docs/asyncapi.yaml", q.Name))
			continue
		}
		keys := slices.Sorted(slices.Values(q.Keys))
		if !slices.Equal(keys, doc.Keys) {
			out = append(out, fmt.Sprintf("queue %s is bound to %v, docs/asyncapi.yaml says %v", q.Name, keys, doc.Keys))
		}
	}
	return out, nil
}
