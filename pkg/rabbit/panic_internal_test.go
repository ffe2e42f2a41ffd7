package rabbit

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// acks records what the consume loop did with each delivery tag.
type acks struct {
	mu  sync.Mutex
	got map[uint64][]string
}

func (a *acks) record(tag uint64, what string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got[tag] = append(a.got[tag], what)
	return nil
}

func (a *acks) Ack(tag uint64, _ bool) error { return a.record(tag, "ack") }
func (a *acks) Nack(tag uint64, _ bool, requeue bool) error {
	if requeue {
		return a.record(tag, "nack-requeue")
	}
	return a.record(tag, "nack")
}
func (a *acks) Reject(tag uint64, requeue bool) error { return a.Nack(tag, false, requeue) }

// A handler that panics on one delivery of a batch: the worker survives,
// the batch is handled again one delivery at a time, the others are acked
// once, and only the one that panics is returned to its queue (not acked:
// nothing of it committed). A wrong number of decisions counts the same.
func TestPanickingHandlerReturnsOnlyItsMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		batch  []string // message ids; "bad" makes the handler fail
		handle func(ds []Delivery) []Decision
		want   map[string][]string
		inLog  string
	}{
		{
			name:  "panic in a batch",
			batch: []string{"a", "bad", "b"},
			handle: func(ds []Delivery) []Decision {
				out := make([]Decision, len(ds))
				for i, d := range ds {
					if d.MessageId == "bad" {
						var m map[string]int
						m["boom"]++ // a nil map write: a runtime panic, as a nil pointer would be
					}
					out[i] = Ack()
				}
				return out
			},
			want:  map[string][]string{"a": {"ack"}, "bad": {"nack-requeue"}, "b": {"ack"}},
			inLog: "panic_internal_test.go", // the stack names where it happened
		},
		{
			name:   "panic alone",
			batch:  []string{"bad"},
			handle: func([]Delivery) []Decision { panic("handler bug") },
			want:   map[string][]string{"bad": {"nack-requeue"}},
			inLog:  "handler bug",
		},
		{
			name:  "too few decisions",
			batch: []string{"a", "bad"},
			handle: func(ds []Delivery) []Decision {
				if len(ds) > 1 || ds[0].MessageId == "bad" {
					return nil
				}
				return []Decision{Ack()}
			},
			want:  map[string][]string{"a": {"ack"}, "bad": {"nack-requeue"}},
			inLog: "0 decisions for 1 deliveries",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := &acks{got: map[uint64][]string{}}
			var batch []amqp.Delivery
			for i, id := range tt.batch {
				batch = append(batch, amqp.Delivery{Acknowledger: a, DeliveryTag: uint64(i + 1), MessageId: id})
			}
			var logs bytes.Buffer
			c := New("amqp://unused/", Topology{}, slog.New(slog.DiscardHandler))
			cfg := ConsumeConfig{Queue: "q", HandlerTimeout: time.Second}
			handle := func(_ context.Context, ds []Delivery) []Decision { return tt.handle(ds) }
			if c.process(context.Background(), cfg, slog.New(slog.NewTextHandler(&logs, nil)), nil, handle, batch) {
				t.Fatal("process asked to abandon the channel")
			}
			for i, id := range tt.batch {
				if got, want := a.got[uint64(i+1)], tt.want[id]; !slices.Equal(got, want) {
					t.Errorf("%s: %v, want %v", id, got, want)
				}
			}
			if !strings.Contains(logs.String(), tt.inLog) {
				t.Errorf("log does not say %q:\n%s", tt.inLog, logs.String())
			}
		})
	}
}
