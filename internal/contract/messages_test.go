package contract

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// TestEveryEventTypeHasAMessage: each type pkg/base/events declares, at the
// version producers write, is a message of docs/asyncapi.yaml.
func TestEveryEventTypeHasAMessage(t *testing.T) {
	m, err := AsyncAPI()
	if err != nil {
		t.Fatal(err)
	}
	for typ := range events.Strategies {
		if !slices.Contains(m.Versions(typ), events.CurrentSchemaVersion) {
			t.Errorf("%s schema_version %d: no message in docs/asyncapi.yaml", typ, events.CurrentSchemaVersion)
		}
	}
}

// TestCheckDelivery: a message built as the dispatcher builds it passes;
// each thing the document rules out is refused, with a reason.
func TestCheckDelivery(t *testing.T) {
	m, err := AsyncAPI()
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(events.OrderCancelledV1{OrderID: 42, Reason: "cancelled by the customer"})
	good := func() amqp.Delivery {
		msg := rabbit.FromEnvelope("saga.events", events.Envelope{
			EventID: "0b7c6a52-7d0e-4d5e-9a54-2f1f4c1e0d11", Type: events.OrderCancelled, AggregateID: 42,
			AggregateVersion: 3, SchemaVersion: 1, CorrelationID: "42", OccurredAt: time.Now(), Payload: payload,
			Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		})
		p := msg.Publishing
		return amqp.Delivery{MessageId: p.MessageId, Type: p.Type, ContentType: p.ContentType, DeliveryMode: p.DeliveryMode,
			Timestamp: p.Timestamp, Headers: p.Headers, Body: p.Body, RoutingKey: msg.RoutingKey}
	}
	if err := m.CheckDelivery(good()); err != nil {
		t.Fatalf("a dispatcher's message: %v", err)
	}
	tests := []struct {
		name   string
		change func(*amqp.Delivery)
		want   string
	}{
		{"extra payload field", func(d *amqp.Delivery) { d.Body = []byte(`{"order_id":"42","reason":"x","refund":true}`) }, "refund"},
		{"order id as a number", func(d *amqp.Delivery) { d.Body = []byte(`{"order_id":42,"reason":"x"}`) }, "order_id"},
		{"missing reason", func(d *amqp.Delivery) { d.Body = []byte(`{"order_id":"42"}`) }, "reason"},
		{"unknown version", func(d *amqp.Delivery) { d.Headers["schema_version"] = int64(2) }, "schema_version 2"},
		{"unknown type", func(d *amqp.Delivery) { d.Type, d.RoutingKey = "order.shipped", "order.shipped" }, "not described"},
		{"undocumented header", func(d *amqp.Delivery) { d.Headers["tenant"] = "a" }, "tenant"},
		{"transient", func(d *amqp.Delivery) { d.DeliveryMode = amqp.Transient }, "delivery_mode"},
		{"message id not a UUID", func(d *amqp.Delivery) { d.MessageId = "42" }, "message_id"},
		{"version as text", func(d *amqp.Delivery) { d.Headers["aggregate_version"] = "3" }, "aggregate_version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := good()
			tt.change(&d)
			err := m.CheckDelivery(d)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("CheckDelivery = %v, want an error about %q", err, tt.want)
			}
		})
	}
}
