package rabbitnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// StartCluster starts one node per Config, all at once (a node costs about
// 5 s of boot), then joins every other node to the first, one at a time:
// stop_app, join_cluster, start_app. The nodes share one Erlang cookie (a
// random one unless the first Config has one). A node whose data directory
// already holds the cluster (a stack started again) is found among the
// first node's running members and not joined again. Queues declared after
// it returns may have members on every node. On failure every node
// started is stopped.
func StartCluster(ctx context.Context, cfgs []Config) ([]*Node, error) {
	if len(cfgs) == 0 {
		return nil, errors.New("rabbitnode: a cluster needs at least one node")
	}
	cookie := cfgs[0].Cookie
	if cookie == "" {
		cookie = NewCookie()
	}
	nodes := make([]*Node, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		cfg.Cookie = cookie
		wg.Go(func() { nodes[i], errs[i] = Start(ctx, cfg) })
	}
	wg.Wait()
	stopAll := func() {
		for _, n := range nodes {
			if n != nil {
				_ = n.Stop(context.Background())
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		stopAll()
		return nil, err
	}
	members, err := nodes[0].RunningNodes(ctx)
	if err != nil {
		stopAll()
		return nil, err
	}
	for _, n := range nodes[1:] {
		if slices.Contains(members, n.Name()) {
			continue
		}
		if err := n.Join(ctx, nodes[0]); err != nil {
			stopAll()
			return nil, err
		}
	}
	return nodes, nil
}

// Join makes n a member of seed's cluster. n's application stops while it
// joins (its clients are cut) and n forgets its own queues and users: the
// cluster's are shared.
func (n *Node) Join(ctx context.Context, seed *Node) error {
	if _, err := n.Ctl(ctx, "stop_app"); err != nil {
		return err
	}
	if _, err := n.Ctl(ctx, "join_cluster", seed.Name()); err != nil {
		return err
	}
	return n.StartApp(ctx)
}

// RunningNodes lists the cluster's running nodes, as n sees them.
func (n *Node) RunningNodes(ctx context.Context) ([]string, error) {
	out, err := n.Ctl(ctx, "cluster_status", "--formatter", "json")
	if err != nil {
		return nil, err
	}
	var status struct {
		Running []string `json:"running_nodes"`
	}
	if err := json.Unmarshal([]byte(jsonPart(out)), &status); err != nil {
		return nil, fmt.Errorf("rabbitnode %s: cluster_status: %w: %s", n.name, err, out)
	}
	return status.Running, nil
}

// QuorumQueue is a quorum queue's replicas, as list_queues shows them.
type QuorumQueue struct {
	Name      string `json:"name"`
	Leader    string `json:"leader"`
	Members   Names  `json:"members"`
	Online    Names  `json:"online"`
	Messages  Count  `json:"messages"` // ready and unacknowledged
	Consumers Count  `json:"consumers"`
}

// Names is a list of node names rabbitmqctl leaves blank ("") for a queue
// that is not replicated.
type Names []string

// UnmarshalJSON reads a list of strings, or anything else as none.
func (n *Names) UnmarshalJSON(b []byte) error {
	var list []string
	if json.Unmarshal(b, &list) != nil {
		list = nil
	}
	*n = list
	return nil
}

// Count is a number rabbitmqctl may leave blank (a queue with no leader
// reachable): blank reads as 0.
type Count int

// UnmarshalJSON reads a number, or anything else as 0.
func (c *Count) UnmarshalJSON(b []byte) error {
	var n float64
	if json.Unmarshal(b, &n) != nil {
		n = 0
	}
	*c = Count(n)
	return nil
}

// QuorumQueues lists the quorum queues of vhost "/" with their leader,
// members, messages and consumers, as n sees them.
func (n *Node) QuorumQueues(ctx context.Context) ([]QuorumQueue, error) {
	out, err := n.Ctl(ctx, "list_queues", "name", "type", "leader", "members", "online", "messages", "consumers", "--formatter", "json")
	if err != nil {
		return nil, err
	}
	var all []struct {
		QuorumQueue
		Type string `json:"type"`
	}
	if err := json.Unmarshal([]byte(jsonPart(out)), &all); err != nil {
		return nil, fmt.Errorf("rabbitnode %s: list_queues: %w: %s", n.name, err, out)
	}
	var qs []QuorumQueue
	for _, q := range all {
		if q.Type == "quorum" {
			qs = append(qs, q.QuorumQueue)
		}
	}
	return qs, nil
}

// ImportDefinitions imports definitions (users, permissions, vhosts: the
// JSON of deploy/provision.sh rabbitmq) into the node's cluster. They go
// through stdin: passwords never appear on a command line.
func (n *Node) ImportDefinitions(ctx context.Context, definitions []byte) error {
	_, err := n.tool(ctx, definitions, "rabbitmqctl", "-q", "import_definitions")
	return err
}

// jsonPart is rabbitmqctl's JSON output without any notice it prints
// before it: from the first line that opens an object or an array.
func jsonPart(out string) string {
	for i, line := range strings.SplitAfter(out, "\n") {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "[") || strings.HasPrefix(t, "{") {
			return strings.Join(strings.SplitAfter(out, "\n")[i:], "")
		}
	}
	return out
}
