package rabbitnode

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// The package's command line tools (rabbitmqctl, rabbitmq-queues),
// addressed to this node only.

// Ctl runs rabbitmqctl against this node only and returns its output.
func (n *Node) Ctl(ctx context.Context, args ...string) (string, error) {
	return n.tool(ctx, nil, "rabbitmqctl", args...)
}

// Queues runs rabbitmq-queues against this node only (quorum_status,
// rebalance, grow) and returns its output.
func (n *Node) Queues(ctx context.Context, args ...string) (string, error) {
	return n.tool(ctx, nil, "rabbitmq-queues", args...)
}

// tool runs one of the package's command line tools, addressed to this
// node by name with this node's HOME (its cookie), stdin on its input.
func (n *Node) tool(ctx context.Context, stdin []byte, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(n.cfg.BinDir, name), append([]string{"-n", n.name}, args...)...)
	cmd.Env = n.env
	cmd.Dir = n.cfg.Dir
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s -n %s %s: %v: %s", name, n.name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// StopApp stops the RabbitMQ application, leaving the Erlang VM running:
// every client connection drops and nothing accepts new ones, as in a
// broker restart.
func (n *Node) StopApp(ctx context.Context) error {
	_, err := n.Ctl(ctx, "stop_app")
	return err
}

// StartApp starts the application again and waits until it accepts AMQP
// connections.
func (n *Node) StartApp(ctx context.Context) error {
	if _, err := n.Ctl(ctx, "start_app"); err != nil {
		return err
	}
	return n.WaitReady(ctx)
}

var closedCount = regexp.MustCompile(`Closed (\d+) connections`)

// CloseAllConnections makes the node close every client connection, in
// every virtual host, with the given reason; it returns how many it closed.
func (n *Node) CloseAllConnections(ctx context.Context, reason string) (int, error) {
	out, err := n.Ctl(ctx, "close_all_connections", "--global", reason)
	if err != nil {
		return 0, err
	}
	count := 0
	for _, m := range closedCount.FindAllStringSubmatch(out, -1) {
		k, _ := strconv.Atoi(m[1])
		count += k
	}
	return count, nil
}
