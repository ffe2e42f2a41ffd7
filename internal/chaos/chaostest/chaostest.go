// Package chaostest runs a stack for a chaos run inside a test: every
// instance of the three services as a real child process under a
// supervisor that starts it again when it dies (as cmd/supervisor does under
// scripts/up.sh), each service on a fresh database of its own that its
// instances share, all on the test's own broker node or cluster (never the
// machine's broker, which other tests use).
package chaostest

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql" // the root connection of the database faults, the services' own users

	"github.com/relmsg/ordersaga/internal/chaos"
	"github.com/relmsg/ordersaga/internal/rabbitnode"
	"github.com/relmsg/ordersaga/internal/sagatest"
	"github.com/relmsg/ordersaga/internal/stack"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// Options shape the stack.
type Options struct {
	// Instances of every service (1 when 0). Instance k of a service is
	// named as the chaos run names it ("order", "order-2").
	Instances int
	// Nodes are the broker: one node (chaos.OwnedBroker), or the nodes of
	// a cluster (chaos.ClusterBroker, which restarts a node it kills).
	// Every instance's AMQP_URL lists them all, rotated as scripts/up.sh
	// rotates them (internal/stack).
	Nodes []*rabbitnode.Node
}

// Harness is a stack the test runs: the services as processes with a supervisor, on databases and a namespace of its own.
type Harness struct {
	chaos.Target
	// Databases are the services' schemas ("order" -> t_order_...).
	Databases map[string]string
	// NS is the namespace of the stack's exchanges and queues.
	NS     rabbit.Namespace
	procs  Supervised
	logDir string
}

// Start starts the stack and stops it when the test ends.
func Start(t *testing.T, o Options) *Harness {
	t.Helper()
	if o.Instances <= 0 {
		o.Instances = 1
	}
	if len(o.Nodes) == 0 {
		t.Fatal("chaostest: no broker node")
	}
	var hosts []string
	for _, n := range o.Nodes {
		hosts = append(hosts, "127.0.0.1:"+strconv.Itoa(n.Port()))
	}
	guest := url.UserPassword("guest", "guest")
	amqpURL := func(svc string, k int) string {
		i := 0
		for j, s := range chaos.Services {
			if s == svc {
				i = j
			}
		}
		return stack.AMQPURLs(guest, stack.Rotate(hosts, i+k-1))
	}
	var opts []sagatest.Option
	for _, svc := range chaos.Services {
		opts = append(opts, sagatest.WithEnv(svc, "AMQP_URL", amqpURL(svc, 1)), sagatest.WithEnv(svc, "OUTBOX_LEASE", "5s"),
			sagatest.WithEnv(svc, "INSTANCE_ID", svc+"-1"))
	}
	ss := sagatest.Start(t, opts...)

	root, err := sql.Open("mysql", sqldbtest.ServerDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })

	st := &Harness{Databases: map[string]string{}, NS: ss.NS, procs: Supervised{}, logDir: t.TempDir()}
	sessions := map[string]chaos.Session{}
	urls := map[string]string{}
	for _, svc := range []*sagatest.Service{ss.Inventory, ss.Payment, ss.Order} {
		// The in-process service gives way to child processes on its
		// database: a SIGKILL must kill a real process. They connect as
		// a database user of the service's own, as under scripts/up.sh:
		// the db-outage fault locks it.
		svc.Stop()
		dsn := ownUser(t, root, svc.Env["MYSQL_DSN"], svc.DB.Name)
		for k := 1; k <= o.Instances; k++ {
			name := chaos.InstanceName(svc.Name, k)
			env := maps.Clone(svc.Env)
			env["MYSQL_DSN"] = dsn
			addr := svc.URL
			if k > 1 {
				port := sagatest.FreePort(t)
				env["HTTP_ADDR"] = fmt.Sprintf("127.0.0.1:%d", port)
				env["INSTANCE_ID"] = fmt.Sprintf("%s-%d", svc.Name, k)
				env["AMQP_URL"] = amqpURL(svc.Name, k)
				addr = fmt.Sprintf("http://127.0.0.1:%d", port)
			}
			st.start(t, name, sagatest.Binary(t, svc.Name), env)
			urls[name] = addr
		}
		sessions[svc.Name] = chaos.Session{Schema: svc.DB.Name}
		st.Databases[svc.Name] = svc.DB.Name
	}
	urls["psp"] = ss.PSP.URL // the one PSP, left running in-process
	bus := &chaos.Bus{URLs: stack.AMQPURLs(guest, hosts), NS: ss.NS}
	t.Cleanup(bus.Close)
	st.Target = chaos.Target{URLs: urls, Processes: st.procs, Bus: bus,
		// The read lock covers this stack's schemas only: a server-wide one
		// would stall every other test running beside this one.
		Database: &chaos.MySQL{Root: root, Sessions: sessions,
			LockSchemas: []string{ss.Order.DB.Name, ss.Inventory.DB.Name, ss.Payment.DB.Name}}}
	if len(o.Nodes) == 1 {
		st.Broker = chaos.OwnedBroker{Node: o.Nodes[0]}
	} else {
		st.Broker = chaos.NewClusterBroker(o.Nodes)
	}
	return st
}

// ownUser creates a database user with every privilege on schema (and
// drops it when the test ends) and returns dsn with it instead of root.
func ownUser(t *testing.T, root *sql.DB, dsn, schema string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	cfg.User, cfg.Passwd = "chaos_"+hex.EncodeToString(b), hex.EncodeToString(b)
	account := "'" + cfg.User + "'@'%'"
	for _, q := range []string{
		"CREATE USER " + account + " IDENTIFIED BY '" + cfg.Passwd + "'",
		"GRANT ALL PRIVILEGES ON " + sqldb.QuoteIdent(schema) + ".* TO " + account,
	} {
		if _, err := root.Exec(q); err != nil {
			t.Fatalf("the test server's account must be able to create users: %s: %v", q, err)
		}
	}
	t.Cleanup(func() { _, _ = root.Exec("DROP USER IF EXISTS " + account) })
	return cfg.FormatDSN()
}

// start runs one instance under a supervisor, its output in its own log.
func (st *Harness) start(t *testing.T, name, bin string, env map[string]string) {
	t.Helper()
	logFile, err := os.Create(filepath.Join(st.logDir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	list := os.Environ()
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	sup := &Supervisor{Path: bin, Env: list, Log: logFile, Delay: 500 * time.Millisecond}
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sup.Stop(20 * time.Second); err != nil {
			t.Errorf("stop %s: %v", name, err)
		}
		logFile.Close()
	})
	st.procs[name] = sup
}

// Logs returns the last n lines of each instance's log that contain match
// ("" for any), with how often its supervisor restarted it.
func (st *Harness) Logs(n int, match string) string {
	var b strings.Builder
	for _, svc := range chaos.Services {
		for k := 1; ; k++ {
			name := chaos.InstanceName(svc, k)
			sup, ok := st.procs[name]
			if !ok {
				break
			}
			data, _ := os.ReadFile(filepath.Join(st.logDir, name+".log"))
			var lines []string
			for _, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
				if strings.Contains(l, match) {
					lines = append(lines, l)
				}
			}
			if len(lines) > n {
				lines = lines[len(lines)-n:]
			}
			fmt.Fprintf(&b, "---- %s (restarted %d times) ----\n%s\n", name, sup.Restarts(), strings.Join(lines, "\n"))
		}
	}
	return b.String()
}
