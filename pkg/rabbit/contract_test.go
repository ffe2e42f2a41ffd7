package rabbit_test

import (
	"fmt"
	"testing"

	"github.com/relmsg/ordersaga/internal/contract"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// TestQueueArgumentsAreTheContracts: each consumer queue of
// docs/asyncapi.yaml lists exactly the arguments Topology declares it
// with.
func TestQueueArgumentsAreTheContracts(t *testing.T) {
	queues, err := contract.Queues()
	if err != nil {
		t.Fatal(err)
	}
	topo := rabbit.Topology{Exchange: "saga.events", DeadLetterExchange: "saga.dlx"}
	for name, q := range queues {
		want := topo.QueueArguments(rabbit.Queue{Name: name})
		if len(q.Arguments) != len(want) {
			t.Errorf("%s: the document lists %d arguments %v, Topology declares %d %v", name, len(q.Arguments), q.Arguments, len(want), want)
		}
		for k, v := range want {
			if fmt.Sprint(q.Arguments[k]) != fmt.Sprint(v) {
				t.Errorf("%s: argument %s is %v in the document, %v in Topology", name, k, q.Arguments[k], v)
			}
		}
	}
}
