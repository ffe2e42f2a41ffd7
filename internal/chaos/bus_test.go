package chaos

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// A message taken out of a retry tier is published again as its producer
// published it: same message_id, body and producer headers, without what
// the retry path and the broker added (the attempt, the first failure, the
// dead-letter history, the tier's expiry, which would let the copy expire
// into the dead queue). A filler is marked as a later attempt and dated
// beyond any replay window.
func TestFreshAndFiller(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	d := amqp.Delivery{MessageId: "01a2", Type: "order.created", ContentType: "application/json", Timestamp: at,
		Expiration: "4000", Body: []byte(`{"x":1}`), Headers: amqp.Table{
			"aggregate_id": "7", "traceparent": "00-ab-cd-01", rabbit.HeaderRetryAttempt: int64(3),
			rabbit.HeaderFirstFailedAt: int64(1), "x-death": []any{}, "x-delivery-count": int64(2)}}
	p := Fresh(d)
	if p.MessageId != d.MessageId || string(p.Body) != string(d.Body) || !p.Timestamp.Equal(at) || p.Type != d.Type ||
		p.Expiration != "" || p.DeliveryMode != amqp.Persistent {
		t.Errorf("fresh %+v, want the original's id, body, time and type, persistent, no expiry", p)
	}
	if len(p.Headers) != 2 || p.Headers["aggregate_id"] != "7" || p.Headers["traceparent"] != "00-ab-cd-01" {
		t.Errorf("fresh headers %v, want the producer's two", p.Headers)
	}
	f := Filler(p)
	if f.Headers[rabbit.HeaderRetryAttempt] != int64(1) || time.Since(f.Timestamp) < 365*24*time.Hour || len(p.Headers) != 2 {
		t.Errorf("filler %+v (the fresh one's headers now %v): want attempt 1, dated a year back, the fresh one untouched", f, p.Headers)
	}
}
