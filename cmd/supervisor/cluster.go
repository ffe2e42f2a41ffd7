package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relmsg/ordersaga/internal/rabbitnode"
	"github.com/relmsg/ordersaga/internal/stack"
)

// The local RabbitMQ cluster (-rabbit-cluster N): N private nodes started
// with internal/rabbitnode, never the machine's broker. Their data stays
// under .run/rabbit/ between runs, like a docker volume, so messages that
// were in the queues at `scripts/up.sh down` are there at the next up; a
// run with another number of nodes starts a fresh cluster.

// brokers are the host:port of the cluster's nodes (nil: the machine's
// broker).
func (c config) brokers() []string {
	var out []string
	for k := 1; k <= c.clusterSize; k++ {
		out = append(out, net.JoinHostPort("127.0.0.1", strconv.Itoa(c.clusterPort+k-1)))
	}
	return out
}

// clusterDir holds one directory per node.
func (c config) clusterDir() string { return filepath.Join(c.runDir, "rabbit") }

// nodeConfigs are the cluster's nodes: ordersaga-k@localhost on
// clusterPort+k-1, in .run/rabbit/ordersaga-k.
func (c config) nodeConfigs() []rabbitnode.Config {
	var out []rabbitnode.Config
	for k := 1; k <= c.clusterSize; k++ {
		name := c.nodeName(k)
		out = append(out, rabbitnode.Config{Name: name, Port: c.clusterPort + k - 1, Dir: filepath.Join(c.clusterDir(), name),
			BootTimeout: c.readyTimeout})
	}
	return out
}

// nodeProc is one node of the cluster and what the supervisor knows of it.
type nodeProc struct {
	stack.Node
	node *rabbitnode.Node
	done chan struct{} // closed once its keeper has returned
}

// startCluster starts the cluster (nothing without -rabbit-cluster) and
// imports the services' users into it, as scripts/up.sh does for the
// machine's broker: the same deploy/provision.sh definitions.
func (s *supervisor) startCluster(ctx context.Context) error {
	cfgs := s.cfg.nodeConfigs()
	if len(cfgs) == 0 {
		return nil
	}
	if err := s.keepOrWipeClusterDir(cfgs); err != nil {
		return err
	}
	s.con.say("starting a RabbitMQ cluster of %d nodes on ports %d-%d (data in .run/rabbit/)", len(cfgs), cfgs[0].Port, cfgs[len(cfgs)-1].Port)
	began := time.Now()
	nodes, err := rabbitnode.StartCluster(ctx, cfgs)
	if err != nil {
		return fmt.Errorf("RabbitMQ cluster: %w", err)
	}
	for _, n := range nodes {
		p := &nodeProc{node: n, done: make(chan struct{})}
		p.refresh()
		s.nodes = append(s.nodes, p)
	}
	definitions, err := s.definitions(ctx)
	if err == nil {
		err = nodes[0].ImportDefinitions(ctx, definitions)
	}
	if err != nil {
		for _, p := range s.nodes {
			close(p.done) // no keeper yet
		}
		s.stopNodes()
		return fmt.Errorf("RabbitMQ cluster: importing the service users: %w", err)
	}
	s.con.say("RabbitMQ cluster ready in %s: %s", time.Since(began).Round(100*time.Millisecond), nodeNames(s.nodes))
	for _, p := range s.nodes {
		go s.keepNode(p)
	}
	return nil
}

// keepOrWipeClusterDir keeps the nodes' data of a previous run with the
// same nodes; a cluster of another size is started afresh.
func (s *supervisor) keepOrWipeClusterDir(cfgs []rabbitnode.Config) error {
	entries, err := os.ReadDir(s.cfg.clusterDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var have, want []string
	for _, e := range entries {
		if e.IsDir() {
			have = append(have, e.Name())
		}
	}
	for _, c := range cfgs {
		want = append(want, c.Name)
	}
	if slices.Equal(have, want) {
		s.con.say("reusing the cluster's data in .run/rabbit/ (remove it for a fresh cluster)")
		return nil
	}
	s.con.say("removing .run/rabbit/ (nodes %v) for a fresh cluster of %d nodes", have, len(cfgs))
	return os.RemoveAll(s.cfg.clusterDir())
}

// definitions are the users and permissions of deploy/provision.sh, from
// the settings in the environment (scripts/up.sh exports them).
func (s *supervisor) definitions(ctx context.Context) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(s.cfg.root, "deploy", "provision.sh"), "rabbitmq")
	cmd.Dir = s.cfg.root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("deploy/provision.sh rabbitmq: %v: %s", err, stderr.String())
	}
	return out, nil
}

// refresh copies the node's pid and executable into its stack.json entry.
func (p *nodeProc) refresh() {
	n := p.node
	p.Node = stack.Node{Name: n.Name(), PID: n.PID(), Port: n.Port(), DistPort: n.DistPort(), Dir: n.Dir(),
		Exe: n.Executable(), Log: n.LogFile(), PIDFile: n.PIDFile(), Restarts: p.Restarts}
}

// keepNode watches a node's VM (started detached, it is not our child) and
// starts it again when it dies by itself: its data directory still holds
// its place in the cluster, so it rejoins, and its quorum queue replicas
// catch up from the others.
func (s *supervisor) keepNode(p *nodeProc) {
	defer close(p.done)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-s.stop; cancel() }()
	defer cancel()
	for {
		select {
		case <-s.stop:
			return
		case <-time.After(500 * time.Millisecond):
		}
		if p.node.Alive() {
			continue
		}
		s.con.say("RabbitMQ node %s (pid %d) exited by itself; starting it again", p.Name, p.PID)
		for attempt := 1; ; attempt++ {
			err := p.node.Restart(ctx)
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				break
			}
			s.con.say("RabbitMQ node %s: restart %d failed: %v", p.Name, attempt, err)
			select {
			case <-s.stop:
				return
			case <-time.After(5 * time.Second):
			}
		}
		s.mu.Lock()
		p.Restarts++
		p.refresh()
		err := s.writeStackLocked()
		s.mu.Unlock()
		s.con.say("RabbitMQ node %s serves again (pid %d)", p.Name, p.PID)
		if err != nil {
			s.con.say("%v", err)
		}
	}
}

// stopNodes stops every node by its pid (SIGTERM, SIGKILL after
// UP_STOP_TIMEOUT), all at once, once their keepers have returned.
func (s *supervisor) stopNodes() {
	if len(s.nodes) == 0 {
		return
	}
	s.con.say("stopping the RabbitMQ nodes %s", nodeNames(s.nodes))
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.stopTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, p := range s.nodes {
		wg.Go(func() {
			select {
			case <-p.done:
			case <-ctx.Done():
			}
			if err := p.node.Stop(ctx); err != nil {
				s.con.say("%v", err)
			}
		})
	}
	wg.Wait()
}

func nodeNames(nodes []*nodeProc) string {
	var out []string
	for _, p := range nodes {
		out = append(out, fmt.Sprintf("%s (:%d, pid %d)", p.Name, p.Port, p.PID))
	}
	return strings.Join(out, ", ")
}
