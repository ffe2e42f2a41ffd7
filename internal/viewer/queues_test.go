package viewer

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// The queues the step-through counts are the contract's: every queue of
// docs/contract.md's table with its consumer and routing keys, and no other.
func TestQueuesFollowTheContract(t *testing.T) {
	src, err := os.ReadFile("../../docs/contract.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(src), "### Exchanges and queues")
	if !ok {
		t.Fatal(`docs/contract.md has no "### Exchanges and queues"`)
	}
	section, _, _ = strings.Cut(section, "\n### ")
	contract := map[string]queueRoute{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 3 || !strings.HasPrefix(cells[0], "`") {
			continue
		}
		q := queueRoute{Queue: strings.Trim(cells[0], "`"), Consumer: strings.Trim(cells[1], "`")}
		for _, k := range strings.Split(cells[2], ",") {
			q.Keys = append(q.Keys, strings.TrimSpace(k))
		}
		contract[q.Queue] = q
	}
	if len(contract) == 0 {
		t.Fatal("no queue rows found in docs/contract.md's table")
	}
	for _, q := range sagaQueues {
		want, ok := contract[q.Queue]
		if !ok {
			t.Errorf("queue %s is not in docs/contract.md", q.Queue)
			continue
		}
		delete(contract, q.Queue)
		got := slices.Sorted(slices.Values(q.Keys))
		if q.Consumer != want.Consumer || !slices.Equal(got, slices.Sorted(slices.Values(want.Keys))) {
			t.Errorf("queue %s: consumer %s keys %v; the contract says %s %v", q.Queue, q.Consumer, got, want.Consumer, want.Keys)
		}
	}
	for name := range contract {
		t.Errorf("docs/contract.md's queue %s is missing from sagaQueues", name)
	}
}
