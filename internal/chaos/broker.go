package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/internal/rabbitnode"
	"github.com/relmsg/ordersaga/internal/stack"
)

// OwnedBroker is a broker node the stack owns (started by rabbitnode for
// this stack alone): every fault may act on it.
type OwnedBroker struct{ Node *rabbitnode.Node }

// CloseConnections implements Broker: the node serves only the stack.
func (b OwnedBroker) CloseConnections(ctx context.Context) (int, error) {
	return b.Node.CloseAllConnections(ctx, "chaos run: broker closes connections")
}

// StopApp implements Broker (the node is the broker: node is "all").
func (b OwnedBroker) StopApp(ctx context.Context, _ string) error { return b.Node.StopApp(ctx) }

// StartApp implements Broker.
func (b OwnedBroker) StartApp(ctx context.Context, _ string) error { return b.Node.StartApp(ctx) }

// SystemBroker is the machine's shared broker (scripts/up.sh uses it). Only
// the stack's own connections are closed, picked by the connection name
// the services give (it ends with their exchange in parentheses), and its
// application is restarted only when AllowRestart says the user asked for
// it: other programs on the machine use the same broker.
type SystemBroker struct {
	Ctl          string // rabbitmqctl; "rabbitmqctl" from PATH when empty
	Exchange     string // the stack's exchange, "saga.events" for scripts/up.sh
	URL          string // an AMQP URL of the broker, to see it accept connections again
	AllowRestart bool
}

// ErrNotOwned refuses a restart of a broker the run does not own.
var ErrNotOwned = errors.New("broker-restart refused: the stack uses a shared broker (pass -allow-system-broker-restart to restart it anyway)")

func (b SystemBroker) ctl(ctx context.Context, args ...string) (string, error) {
	name := b.Ctl
	if name == "" {
		name = "rabbitmqctl"
	}
	out, err := exec.CommandContext(ctx, name, append([]string{"-q"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// CloseConnections implements Broker: only connections named after the
// stack's exchange.
func (b SystemBroker) CloseConnections(ctx context.Context) (int, error) {
	out, err := b.ctl(ctx, "list_connections", "pid", "client_properties")
	if err != nil {
		return 0, err
	}
	mark := "(" + b.Exchange + ")"
	n := 0
	for _, line := range strings.Split(out, "\n") {
		pid, props, ok := strings.Cut(line, "\t")
		if !ok || !strings.Contains(props, mark) {
			continue
		}
		if _, err := b.ctl(ctx, "close_connection", pid, "chaos run: broker closes connections"); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// StopApp implements Broker.
func (b SystemBroker) StopApp(ctx context.Context, _ string) error {
	if !b.AllowRestart {
		return ErrNotOwned
	}
	_, err := b.ctl(ctx, "stop_app")
	return err
}

// StartApp implements Broker.
func (b SystemBroker) StartApp(ctx context.Context, _ string) error {
	if !b.AllowRestart {
		return ErrNotOwned
	}
	if _, err := b.ctl(ctx, "start_app"); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := amqp.Dial(b.URL)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the broker does not accept connections after start_app: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ClusterBroker is a cluster of nodes the stack owns (scripts/up.sh
// --rabbit-cluster, or a test's): every fault may act on it, one node at a
// time, and a node may be killed outright (Cluster).
type ClusterBroker struct {
	// Configs are the nodes as they were started (rabbitnode.Attach finds
	// each one's current pid from them).
	Configs []rabbitnode.Config
	// Supervised: the stack's supervisor starts a killed node again (cmd/supervisor
	// does); otherwise KillNode starts it again itself.
	Supervised bool
}

// NewClusterBroker is the broker of nodes a test started itself: KillNode
// starts a killed node again.
func NewClusterBroker(nodes []*rabbitnode.Node) ClusterBroker {
	var b ClusterBroker
	for _, n := range nodes {
		b.Configs = append(b.Configs, n.Config())
	}
	return b
}

// StackClusterBroker is the broker of the nodes in scripts/up.sh's
// stack.json, which its supervisor starts again when they die.
func StackClusterBroker(nodes []stack.Node) ClusterBroker {
	b := ClusterBroker{Supervised: true}
	for _, n := range nodes {
		name, _, _ := strings.Cut(n.Name, "@")
		b.Configs = append(b.Configs, rabbitnode.Config{Name: name, Port: n.Port, DistPort: n.DistPort, Dir: n.Dir})
	}
	return b
}

// Nodes implements Cluster.
func (b ClusterBroker) Nodes() []string {
	var out []string
	for _, c := range b.Configs {
		out = append(out, c.Name)
	}
	return out
}

// node attaches to the node called name (before the "@").
func (b ClusterBroker) node(name string) (*rabbitnode.Node, error) {
	for _, c := range b.Configs {
		if c.Name == name {
			return rabbitnode.Attach(c)
		}
	}
	return nil, fmt.Errorf("no node %q in the cluster (%v)", name, b.Nodes())
}

// running attaches to every node whose VM runs.
func (b ClusterBroker) running() []*rabbitnode.Node {
	var out []*rabbitnode.Node
	for _, c := range b.Configs {
		if n, err := rabbitnode.Attach(c); err == nil && n.Alive() {
			out = append(out, n)
		}
	}
	return out
}

// CloseConnections implements Broker: every client connection of every
// node (the cluster serves only the stack).
func (b ClusterBroker) CloseConnections(ctx context.Context) (int, error) {
	total := 0
	var errs []error
	for _, n := range b.running() {
		k, err := n.CloseAllConnections(ctx, "chaos run: broker closes connections")
		total += k
		errs = append(errs, err)
	}
	return total, errors.Join(errs...)
}

// StopApp implements Broker: one node's application stops (its clients
// move to the other nodes; its quorum queue leaders hand over).
func (b ClusterBroker) StopApp(ctx context.Context, node string) error {
	n, err := b.node(node)
	if err != nil {
		return err
	}
	return n.StopApp(ctx)
}

// StartApp implements Broker.
func (b ClusterBroker) StartApp(ctx context.Context, node string) error {
	n, err := b.node(node)
	if err != nil {
		return err
	}
	return n.StartApp(ctx)
}

// KillNode implements Cluster.
func (b ClusterBroker) KillNode(ctx context.Context, node string, killed func()) (string, error) {
	why := ""
	if node == "leader" || strings.HasPrefix(node, "leader:") {
		name, queue, err := b.leaderOf(ctx, strings.TrimPrefix(strings.TrimPrefix(node, "leader"), ":"))
		if err != nil {
			return "", err
		}
		node, why = name, " (leader of "+queue+")"
	}
	n, err := b.node(node)
	if err != nil {
		return "", err
	}
	pid := n.PID()
	if !n.Alive() {
		return "", fmt.Errorf("node %s is not running (pid %d)", n.Name(), pid)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return "", fmt.Errorf("SIGKILL node %s (pid %d): %w", n.Name(), pid, err)
	}
	detail := fmt.Sprintf("SIGKILL node %s%s, pid %d", n.Name(), why, pid)
	if killed != nil {
		killed()
	}
	if !b.Supervised {
		for n.Alive() { // the VM's exit takes a moment
			time.Sleep(20 * time.Millisecond)
		}
		if err := n.Restart(ctx); err != nil {
			return detail, err
		}
		return fmt.Sprintf("%s; started again as pid %d", detail, n.PID()), nil
	}
	// The supervisor starts it again: wait for a new pid that serves.
	deadline := time.Now().Add(90 * time.Second)
	for {
		if again, err := rabbitnode.Attach(n.Config()); err == nil && again.PID() != pid && again.Alive() {
			if err := again.WaitReady(ctx); err == nil {
				return fmt.Sprintf("%s; serving again as pid %d", detail, again.PID()), nil
			}
		}
		if time.Now().After(deadline) {
			return detail, fmt.Errorf("node %s did not serve again within 90s (is the stack's supervisor running?)", n.Name())
		}
		select {
		case <-ctx.Done():
			return detail, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// leaderOf finds the node leading queue, or ("") the busiest consumer
// queue: the one with the most messages waiting, else the most consumers,
// else the first by name. Retry tiers (<queue>.delay.<n>) and dead queues
// (<queue>.dead) are left out on purpose, and so are the run's own capture
// queues: a tier also holds messages, and
// would often be the busiest, but killing its leader is the retry kind of
// node-kill (RetryLeader), which makes sure a retry is waiting there.
// Killing the node leading a consumer queue makes it elect a new leader
// while work goes through it.
func (b ClusterBroker) leaderOf(ctx context.Context, queue string) (node, name string, err error) {
	var errs []error
	for _, n := range b.running() {
		qs, err := n.QuorumQueues(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		qs = slices.DeleteFunc(qs, func(q rabbitnode.QuorumQueue) bool {
			if queue != "" {
				return q.Leader == "" || q.Name != queue
			}
			return q.Leader == "" || strings.Contains(q.Name, ".delay.") || strings.HasSuffix(q.Name, ".dead") ||
				strings.Contains(q.Name, "chaos.capture.") // the run's own (Bus.Capture)
		})
		if len(qs) == 0 {
			continue
		}
		busiest := slices.MinFunc(qs, func(a, b rabbitnode.QuorumQueue) int {
			return cmp.Or(cmp.Compare(b.Messages, a.Messages), cmp.Compare(b.Consumers, a.Consumers), cmp.Compare(a.Name, b.Name))
		})
		node, _, _ = strings.Cut(busiest.Leader, "@")
		return node, busiest.Name, nil
	}
	what := "any quorum queue"
	if queue != "" {
		what = "quorum queue " + queue
	}
	return "", "", fmt.Errorf("no leader of %s found on any running node: %w", what, errors.Join(errs...))
}

// RetryLeader implements Cluster: among queue's retry tiers of two and up
// (a second or more to wait: time to list the queues and send the
// signal), the one holding the most retries, the longest on a tie.
func (b ClusterBroker) RetryLeader(ctx context.Context, queue string) (node, tier string, n int, err error) {
	qs, err := b.quorumQueues(ctx)
	if err != nil {
		return "", "", 0, err
	}
	best, bestTier := rabbitnode.QuorumQueue{}, -1
	for _, q := range qs {
		var k int
		if _, err := fmt.Sscanf(strings.TrimPrefix(q.Name, queue+".delay."), "%d", &k); err != nil ||
			!strings.HasPrefix(q.Name, queue+".delay.") || k < 2 || q.Leader == "" || q.Messages == 0 {
			continue
		}
		if q.Messages > best.Messages || (q.Messages == best.Messages && k > bestTier) {
			best, bestTier = q, k
		}
	}
	if bestTier < 0 {
		return "", "", 0, nil
	}
	node, _, _ = strings.Cut(best.Leader, "@")
	return node, best.Name, int(best.Messages), nil
}

// QueueTotals implements Cluster, as the first running node lists them.
func (b ClusterBroker) QueueTotals(ctx context.Context) (map[string]int, error) {
	qs, err := b.quorumQueues(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, q := range qs {
		out[q.Name] = int(q.Messages)
	}
	return out, nil
}

// quorumQueues are the cluster's quorum queues as the first running node
// that answers lists them.
func (b ClusterBroker) quorumQueues(ctx context.Context) ([]rabbitnode.QuorumQueue, error) {
	var errs []error
	for _, n := range b.running() {
		qs, err := n.QuorumQueues(ctx)
		if err == nil {
			return qs, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("no running node listed the queues: %w", errors.Join(errs...))
}
