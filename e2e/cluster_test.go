package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/internal/chaos"
	"github.com/relmsg/ordersaga/internal/chaos/chaostest"
	"github.com/relmsg/ordersaga/internal/rabbitnode"
	"github.com/relmsg/ordersaga/internal/stack"
	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
)

// TestScaleOutOnACluster runs the system as scripts/up.sh -n 2
// --rabbit-cluster 3 does: a three-node RabbitMQ cluster of the test's own
// (the machine's broker is not touched) and, in the saga's subtests, two
// instances of every service as real processes sharing each service's
// schema and queues. The subtests share the cluster and run one after the
// other; each leaves all three nodes running.
func TestScaleOutOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: a RabbitMQ cluster and the whole stack (run without -short)")
	}
	t.Parallel()
	nodes := cluster.Nodes(t)
	t.Run("outbox across a node switch", func(t *testing.T) { outboxAcrossANodeSwitch(t, nodes) })
	t.Run("leader and instance kills under load", func(t *testing.T) { leaderAndInstanceKills(t, nodes) })
	t.Run("a node stopped and started again", func(t *testing.T) { nodeStoppedAndStarted(t, nodes) })
}

// outboxAcrossANodeSwitch: the dispatcher publishes a batch to the node it
// is connected to, which is frozen (SIGSTOP) so that no confirm comes, then
// killed (SIGKILL). While the confirms are pending the rows stay 'sending';
// after the kill none of them is marked sent until it has been published
// again, on another node, and confirmed; every event arrives.
func outboxAcrossANodeSwitch(t *testing.T, nodes []*rabbitnode.Node) {
	db := sqldbtest.New(t, "order")
	ns := rabbittest.Namespace(t)
	topo := ns.Topology(rabbit.Queue{Name: "sink", Keys: []string{"order.created"}})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	conn := rabbit.New(clusterURLs(nodes, 0), topo, quiet)
	d := outbox.New(db.DB, outbox.Config{Exchange: topo.Exchange, NewPublisher: outbox.RabbitPublishers(conn),
		BatchSize: 20, Lease: time.Minute, ConfirmTimeout: 20 * time.Second, PollInterval: 100 * time.Millisecond,
		Backoff: retry.Backoff{Base: 100 * time.Millisecond, Cap: time.Second}, Log: quiet})
	ctx, cancel := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	t.Cleanup(func() { cancel(); loops.Wait() })
	fp := failpoint.NewRegistry()
	loops.Go(func() { _ = conn.Run(ctx) })
	loops.Go(func() { _ = d.Run(failpoint.WithRegistry(ctx, fp)) })
	testutil.WaitFor(t, 30*time.Second, "the connection", conn.Connected)
	// One event first, so that the dispatcher's channel is open on its
	// node before the node freezes.
	warm := addEventsFrom(t, db.DB, 1000, 1)
	d.Wake()
	testutil.WaitFor(t, 30*time.Second, "the first event sent", func() bool { return countStatus(t, db.DB)["sent"] == 1 })

	// The next batch stops after it is sent, before its confirms are
	// awaited: the node dies with the batch on the wire.
	sent := fp.Pause("outbox.dispatch.after-publish-before-confirm", 1)
	t.Cleanup(sent.Release) // before the loops' cleanup: last in, first out
	victim := nodeAt(t, nodes, conn.Address())
	if err := syscall.Kill(victim.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ids := append(warm, addEvents(t, db.DB, 50)...)
	d.Wake()
	select {
	case <-sent.Reached():
	case <-time.After(30 * time.Second):
		t.Fatal("no batch was published to the frozen node")
	}
	pending, err := outbox.List(context.Background(), db.DB, outbox.Filter{Status: "sending", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if sent := countStatus(t, db.DB)["sent"]; sent > int64(len(warm)) {
		t.Fatalf("%d rows marked sent while their node was frozen", sent-int64(len(warm)))
	}
	if err := syscall.Kill(victim.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sent.Release()
	testutil.WaitFor(t, 60*time.Second, "every row sent through another node", func() bool {
		return countStatus(t, db.DB)["sent"] == int64(len(ids))
	})
	if addr := conn.Address(); addr == "" || nodeAt(t, nodes, addr) == victim {
		t.Errorf("the dispatcher's connection is on %q, want another node than %s", addr, victim.Name())
	}
	resent := wantPublishedAgain(t, db.DB, pending)
	if err := victim.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Every event arrived at least once (twice when the frozen node had
	// taken it in before it died): read the queue on a surviving node.
	got := map[string]int{}
	for _, m := range drainOn(t, nodes, victim, ns.Queue("sink"), len(ids)) {
		got[m]++
	}
	for _, id := range ids {
		if got[id] == 0 {
			t.Errorf("event %s never arrived", id)
		}
	}
	t.Logf("%d events, %d waiting for their confirms at the kill, %d published more than once, %d arrived (%d distinct)",
		len(ids), len(pending), resent, sum(got), len(got))
}

// wantPublishedAgain: the batch that was waiting for its confirms when its
// node died was published again (attempts counts the claims) before it was
// sent. It returns how many rows were published more than once.
func wantPublishedAgain(t *testing.T, db *sqlx.DB, pending []outbox.Row) int {
	t.Helper()
	rows, err := outbox.List(context.Background(), db, outbox.Filter{Status: "sent", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	attempts := map[string]int{}
	resent := 0
	for _, r := range rows {
		attempts[r.EventID] = r.Attempts
		if r.Attempts > 1 {
			resent++
		}
	}
	for _, r := range pending {
		if attempts[r.EventID] < 2 {
			t.Errorf("event %s, unconfirmed when its node died, is sent after %d attempt(s): want a second publish", r.EventID, attempts[r.EventID])
		}
	}
	return resent
}

// leaderAndInstanceKills: a mixed load (the chaos run's) while the node
// leading inventory's queue (every order goes through it) dies by
// SIGKILL, then one instance of each service; then every check of the
// chaos run: every order terminal, stock exact, one charge per confirmed
// order, no dead letter, no double effect.
func leaderAndInstanceKills(t *testing.T, nodes []*rabbitnode.Node) {
	st := chaostest.Start(t, chaostest.Options{Instances: 2, Nodes: nodes})
	busy := st.NS.Queue("inventory.order-events")
	cfg := chaos.Config{
		Seed: 14,
		// The load outlasts the last fault by six seconds: the saga runs on
		// with one node and one instance of each service fewer.
		Load: chaos.Load{Rate: 10, Duration: 14 * time.Second, WaveSize: 6, WaveSupply: 2},
		Faults: chaos.FaultSchedule{Script: []chaos.Fault{
			{At: 4 * time.Second, Kind: chaos.FaultNodeKill, Target: "leader:" + busy},
			{At: 6 * time.Second, Kind: chaos.FaultKill, Target: "order-2"},
			{At: 7 * time.Second, Kind: chaos.FaultKill, Target: "inventory"},
			{At: 8 * time.Second, Kind: chaos.FaultKill, Target: "payment-2"},
		}},
		Quiet:       3 * time.Second,
		RestTimeout: 90 * time.Second,
		Progress:    testLog{t},
	}
	rep := runChaos(t, st, cfg)
	if n := rep.FaultsByKind[chaos.FaultNodeKill] + rep.FaultsByKind[chaos.FaultKill]; n != 4 {
		t.Errorf("%d of the 4 faults injected: %+v", n, rep.Faults)
	}
	t.Logf("figures: %d orders; longest stall %s (from +%s); time to terminal p99 %s, max %s; duplicates dropped %v",
		rep.TimeToTerminal.N, rep.LongestStall.Length, rep.LongestStall.From, rep.TimeToTerminal.P99, rep.TimeToTerminal.Max, rep.Duplicates)
}

// nodeStoppedAndStarted: one node stops cleanly (its VM ends) while the
// others carry the load; started again, it rejoins the cluster, every
// quorum queue has its replica there online again, and when another node
// then dies, the saga keeps every check through it.
func nodeStoppedAndStarted(t *testing.T, nodes []*rabbitnode.Node) {
	st := chaostest.Start(t, chaostest.Options{Instances: 2, Nodes: nodes})
	node, others := nodes[1], []*rabbitnode.Node{nodes[0], nodes[2]}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := node.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	short := chaos.Config{Seed: 15, Load: chaos.Load{Rate: 10, Duration: 8 * time.Second, WaveSize: 4, WaveSupply: 2},
		Quiet: 3 * time.Second, RestTimeout: 60 * time.Second, Progress: testLog{t}}
	runChaos(t, st, short)

	if err := node.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForErr(t, 60*time.Second, node.Name()+" back in the cluster with every replica online", func() (bool, error) {
		running, err := others[0].RunningNodes(ctx)
		if err != nil || !slices.Contains(running, node.Name()) {
			return false, err
		}
		qs, err := ownQueues(ctx, others[0], st.NS)
		if err != nil {
			return false, err
		}
		for _, q := range qs {
			if !slices.Contains(q.Online, node.Name()) {
				return false, fmt.Errorf("%s: online %v", q.Name, q.Online)
			}
		}
		return len(qs) > 0, nil
	})
	// Leaders do not come back by themselves: ask for a rebalance. It is
	// best effort (a replica still catching up on its log is skipped and
	// not retried), so what it did is reported, not asserted.
	if _, err := node.Queues(ctx, "rebalance", "quorum"); err != nil {
		t.Errorf("rebalance: %v", err)
	}
	qs, err := ownQueues(ctx, node, st.NS)
	if err != nil {
		t.Fatal(err)
	}
	leaders := map[string]int{}
	for _, q := range qs {
		leaders[q.Leader]++
	}
	t.Logf("leaders after the rebalance: %v (%s leads %d of %d)", leaders, node.Name(), leaders[node.Name()], len(qs))
	// What proves the node is back in service: another node, the one
	// leading the most queues, dies while the saga runs. A quorum queue
	// needs two of its three members, so from then on every queue commits
	// through the restarted node, and every check of the chaos run must
	// still hold.
	victim := others[0].Name()
	if leaders[others[1].Name()] > leaders[victim] {
		victim = others[1].Name()
	}
	short.Seed = 16
	victim, _, _ = strings.Cut(victim, "@") // the chaos run names nodes without the host
	short.Faults = chaos.FaultSchedule{Script: []chaos.Fault{{At: 3 * time.Second, Kind: chaos.FaultNodeKill, Target: victim}}}
	rep := runChaos(t, st, short)
	if rep.FaultsByKind[chaos.FaultNodeKill] != 1 {
		t.Errorf("the kill of %s after the restart was not injected: %+v", victim, rep.Faults)
	}
}

// runChaos runs the chaos run and fails the test on any violation.
func runChaos(t *testing.T, st *chaostest.Harness, cfg chaos.Config) *chaos.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Load.Duration+5*time.Minute)
	defer cancel()
	rep, err := chaos.Run(ctx, cfg, st.Target)
	if err != nil {
		t.Fatalf("chaos run: %v\n%s", err, st.Logs(30, ""))
	}
	var out bytes.Buffer
	rep.Print(&out)
	t.Logf("report:\n%s", out.String())
	for _, f := range rep.Faults {
		if f.Error != "" {
			t.Errorf("fault %s at +%s was not injected: %s", f.Fault, f.Started, f.Error)
		}
	}
	if !rep.Rest.Reached {
		t.Errorf("no rest within %s: waiting for %s", cfg.RestTimeout, rep.Rest.Waiting)
	}
	for _, v := range rep.Violations {
		t.Errorf("violation: %s", v)
	}
	if t.Failed() {
		t.Logf("instance logs:\n%s", st.Logs(30, ""))
	}
	return rep
}

// clusterURLs is the nodes' AMQP_URL as guest, rotated by k.
func clusterURLs(nodes []*rabbitnode.Node, k int) string {
	var hosts []string
	for _, n := range nodes {
		hosts = append(hosts, "127.0.0.1:"+strconv.Itoa(n.Port()))
	}
	return stack.AMQPURLs(url.UserPassword("guest", "guest"), stack.Rotate(hosts, k))
}

// nodeAt is the node listening on addr (host:port).
func nodeAt(t *testing.T, nodes []*rabbitnode.Node, addr string) *rabbitnode.Node {
	t.Helper()
	for _, n := range nodes {
		if strings.HasSuffix(addr, ":"+strconv.Itoa(n.Port())) {
			return n
		}
	}
	t.Fatalf("no node at %q", addr)
	return nil
}

// ownQueues are the namespace's quorum queues, as node sees them.
func ownQueues(ctx context.Context, node *rabbitnode.Node, ns rabbit.Namespace) ([]rabbitnode.QuorumQueue, error) {
	qs, err := node.QuorumQueues(ctx)
	return slices.DeleteFunc(qs, func(q rabbitnode.QuorumQueue) bool { return !strings.HasPrefix(q.Name, string(ns)) }), err
}

// addEvents commits n order.created events in one transaction.
func addEvents(t *testing.T, db *sqlx.DB, n int) []string { return addEventsFrom(t, db, 1, n) }

// addEventsFrom commits n order.created events of orders first, first+1, ...
func addEventsFrom(t *testing.T, db *sqlx.DB, first uint64, n int) []string {
	t.Helper()
	evs := make([]outbox.Event, n)
	for i := range evs {
		id := first + uint64(i)
		evs[i] = outbox.Event{AggregateID: id, AggregateVersion: 1, Type: "order.created",
			Payload: map[string]any{"order_id": strconv.FormatUint(id, 10)}}
	}
	var ids []string
	if err := sqldb.WithTx(context.Background(), db, func(tx *sqlx.Tx) (err error) {
		ids, err = outbox.Add(context.Background(), tx, evs...)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return ids
}

func countStatus(t *testing.T, db *sqlx.DB) map[string]int64 {
	t.Helper()
	s, err := outbox.Summarize(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return s.ByStatus
}

// drainOn reads every message of queue through a node other than skip,
// waiting for at least want.
func drainOn(t *testing.T, nodes []*rabbitnode.Node, skip *rabbitnode.Node, queue string, want int) []string {
	t.Helper()
	var via *rabbitnode.Node
	for _, n := range nodes {
		if n != skip {
			via = n
			break
		}
	}
	conn, err := amqp.Dial(via.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for deadline := time.Now().Add(30 * time.Second); ; {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("get from %s: %v", queue, err)
		}
		if ok {
			ids = append(ids, d.MessageId)
			continue
		}
		if len(ids) >= want || time.Now().After(deadline) {
			return ids
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// testLog sends the chaos run's progress lines to the test log.
type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
