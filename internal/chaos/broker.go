package chaos

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/internal/rabbitnode"
)

// OwnedBroker is a broker node the stack owns (started by rabbitnode for
// this stack alone): every fault may act on it.
type OwnedBroker struct{ Node *rabbitnode.Node }

// CloseConnections implements Broker: the node serves only the stack.
func (b OwnedBroker) CloseConnections(ctx context.Context) (int, error) {
	return b.Node.CloseAllConnections(ctx, "chaos run: broker closes connections")
}

// StopApp implements Broker.
func (b OwnedBroker) StopApp(ctx context.Context) error { return b.Node.StopApp(ctx) }

// StartApp implements Broker.
func (b OwnedBroker) StartApp(ctx context.Context) error { return b.Node.StartApp(ctx) }

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
func (b SystemBroker) StopApp(ctx context.Context) error {
	if !b.AllowRestart {
		return ErrNotOwned
	}
	_, err := b.ctl(ctx, "stop_app")
	return err
}

// StartApp implements Broker.
func (b SystemBroker) StartApp(ctx context.Context) error {
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
