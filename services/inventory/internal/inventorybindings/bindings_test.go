package inventorybindings

import (
	"slices"
	"testing"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// The queue is bound to exactly the events the service has handlers for: a
// key without a handler would dead-letter every such message, a handler
// without a key would never run.
func TestBindingsMatchHandlers(t *testing.T) {
	topo := Topology(rabbit.Namespace("t-x."))
	if len(topo.Queues) != 1 || topo.Queues[0].Name != "t-x.inventory.order-events" || topo.Exchange != "t-x.saga.events" {
		t.Fatalf("topology = %+v, want one queue t-x.inventory.order-events on t-x.saga.events", topo)
	}
	keys := slices.Sorted(slices.Values(topo.Queues[0].Keys))
	want := []string{events.OrderCancelled, events.OrderConfirmed, events.OrderCreated}
	if !slices.Equal(keys, want) {
		t.Errorf("keys = %v, want %v", keys, want)
	}
	h := Handlers(nil).Plain
	for _, k := range keys {
		if h[k] == nil {
			t.Errorf("no handler for bound key %s", k)
		}
	}
	if len(h) != len(keys) {
		t.Errorf("%d handlers for %d bound keys", len(h), len(keys))
	}
	if ConsumerName != "inventory" {
		t.Errorf("ConsumerName = %q: it is part of the inbox key and must stay \"inventory\"", ConsumerName)
	}
}
