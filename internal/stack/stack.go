// Package stack describes the local stack that scripts/up.sh runs: the
// table of services (name, settings prefix, schema, port), their instances
// (scripts/up.sh -n 2: instance k of a service listens on its port +
// 100*(k-1)), the local RabbitMQ cluster (--rabbit-cluster 3: nodes on
// 5701-5703), the environment each process gets, and .run/stack.json, the
// machine-readable account of what is running (every process and broker
// node with its pid, URL or port, and log) that cmd/supervisor writes and other
// tools (the failure lab, the chaos run, the viewer) read.
//
// docker-compose.yml runs the same services; the tests in deploy/ hold it
// against this table and Instance.Env.
package stack

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/procfs"
)

// Service is one service of the saga.
type Service struct {
	Name string // directory under services/, binary under bin/, compose service
	Key  string // prefix of its settings: ORDER_DB_USER, ORDER_AMQP_PASSWORD, ORDER_FAILPOINTS
	DB   string // its schema
	Port int    // HTTP port of its first instance
}

// Services are started in this order and stopped in the reverse one.
var Services = []Service{
	{Name: "order", Key: "ORDER", DB: "order_service", Port: 8081},
	{Name: "inventory", Key: "INVENTORY", DB: "inventory_service", Port: 8082},
	{Name: "payment-fake", Key: "PAYMENT", DB: "payment_service", Port: 8083},
}

// Lookup returns the service called name.
func Lookup(name string) (Service, bool) {
	for _, s := range Services {
		if s.Name == name {
			return s, true
		}
	}
	return Service{}, false
}

// URL is where the service's first instance answers on this machine.
func (s Service) URL() string { return s.Instance(1).URL() }

// Instance is one process of a service. Instances of a service share its
// schema and its queues (competing consumers).
type Instance struct {
	Service Service
	K       int // 1, 2, ...
	N       int // instances of each service in the stack (0: K)
}

// Instance returns instance k (from 1) of the service.
func (s Service) Instance(k int) Instance { return Instance{Service: s, K: k} }

// InstanceOf returns instance k of the service in a stack of n instances
// of each service: its Env lists the n instances of its peers.
func (s Service) InstanceOf(k, n int) Instance { return Instance{Service: s, K: k, N: n} }

// URLs are the base URLs of the first n instances, separated by commas
// (INVENTORY_URL, PAYMENT_URL), rotated to start at instance k (mod n), so
// that neighbouring callers start on different instances.
func (s Service) URLs(n, k int) string {
	var out []string
	for j := 1; j <= max(n, 1); j++ {
		out = append(out, s.Instance(j).URL())
	}
	return strings.Join(Rotate(out, k-1), ",")
}

// InstanceSpacing is the distance between the ports of two instances of a
// service: instance k listens on the service's port + InstanceSpacing*(k-1)
// (order: 8081, 8181, 8281).
const InstanceSpacing = 100

// Name is the instance's name under .run/ (order.log, order-2.pid): the
// service's name for the first instance, as a stack of one instance each
// has always written.
func (i Instance) Name() string {
	if i.K == 1 {
		return i.Service.Name
	}
	return fmt.Sprintf("%s-%d", i.Service.Name, i.K)
}

// ID is the instance's INSTANCE_ID ("order-1", "order-2"): the name it
// gives in its logs, metrics and records.
func (i Instance) ID() string { return fmt.Sprintf("%s-%d", i.Service.Name, i.K) }

// Port is the instance's HTTP port.
func (i Instance) Port() int { return i.Service.Port + InstanceSpacing*(i.K-1) }

// URL is where the instance answers on this machine.
func (i Instance) URL() string { return "http://127.0.0.1:" + strconv.Itoa(i.Port()) }

// Env is what the instance gets on top of the environment it inherits,
// computed from the settings (getenv: the shell's environment, then .env
// or .env.example, as scripts/up.sh exports them). httpHost is the
// interface it listens on. brokers are the host:port of the broker's nodes
// (nil: RABBITMQ_HOST:RABBITMQ_PORT, the machine's broker); AMQP_URL lists
// them all, rotated so that neighbouring instances start on different
// nodes (see Rotate).
func (i Instance) Env(getenv func(string) string, httpHost string, brokers []string) map[string]string {
	s := i.Service
	get := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	dsn := mysql.NewConfig()
	dsn.User, dsn.Passwd = getenv(s.Key+"_DB_USER"), getenv(s.Key+"_DB_PASSWORD")
	dsn.Net, dsn.DBName = "tcp", s.DB
	dsn.Addr = net.JoinHostPort(get("MYSQL_HOST", "127.0.0.1"), get("MYSQL_PORT", "3306"))
	if len(brokers) == 0 {
		brokers = []string{net.JoinHostPort(get("RABBITMQ_HOST", "127.0.0.1"), get("RABBITMQ_PORT", "5672"))}
	}
	user := url.UserPassword(getenv(s.Key+"_AMQP_USER"), getenv(s.Key+"_AMQP_PASSWORD"))
	env := map[string]string{
		"HTTP_ADDR":   net.JoinHostPort(httpHost, strconv.Itoa(i.Port())),
		"INSTANCE_ID": i.ID(),
		"MYSQL_DSN":   dsn.FormatDSN(),
		"AMQP_URL":    AMQPURLs(user, Rotate(brokers, s.index()+i.K-1)),
		// The schemas are created by scripts/up.sh (deploy/provision.sh):
		// a service user may not create one.
		"MYSQL_CREATE_DATABASE": "false",
		"FAILPOINTS":            get(s.Key+"_FAILPOINTS", getenv("FAILPOINTS")),
		"DEMO_MODE":             get("DEMO_MODE", "true"),
		"LOG_LEVEL":             get("LOG_LEVEL", "info"),
		"ADMIN_TOKEN":           getenv("ADMIN_TOKEN"),
		"OUTBOX_LEASE":          get("OUTBOX_LEASE", "5s"),
	}
	switch s.Name {
	case "order":
		// Every instance of its peers: the peer client moves on to the
		// next on a transport error.
		inventory, _ := Lookup("inventory")
		payment, _ := Lookup("payment-fake")
		n := max(i.N, i.K)
		env["INVENTORY_URL"], env["PAYMENT_URL"] = inventory.URLs(n, i.K), payment.URLs(n, i.K)
	case "payment-fake":
		// The one PSP process every instance calls (its switches apply to
		// every caller), with the key it charges with.
		env["PSP_URL"] = PSP.URL() + "/psp"
		env["PSP_TOKEN"] = getenv("PSP_TOKEN")
	}
	return env
}

// index is the service's place in Services.
func (s Service) index() int {
	for i, t := range Services {
		if t.Name == s.Name {
			return i
		}
	}
	return 0
}

// Rotate returns list starting at its element k (mod its length): the
// order in which an instance tries the broker's nodes, so that the
// instances spread over the nodes while each still knows every node.
func Rotate(list []string, k int) []string {
	if len(list) == 0 {
		return nil
	}
	k %= len(list)
	return append(slices.Clone(list[k:]), list[:k]...)
}

// AMQPURLs is the AMQP_URL of a user for the nodes at hosts (host:port
// each), vhost "/": one URL per node, separated by commas.
func AMQPURLs(user *url.Userinfo, hosts []string) string {
	var out []string
	for _, h := range hosts {
		u := url.URL{Scheme: "amqp", User: user, Host: h, Path: "/"}
		out = append(out, u.String())
	}
	return strings.Join(out, ",")
}

// ClusterPort is the AMQP port of node 1 of the local cluster of
// scripts/up.sh --rabbit-cluster: node k listens on ClusterPort+k-1
// (5701-5703), its Erlang distribution on that + 20000.
const ClusterPort = 5701

// NodeName is the name of node k of the local cluster (before the "@").
func NodeName(k int) string { return fmt.Sprintf("ordersaga-%d", k) }

// PSP is the fake payment provider (services/payment-fake/cmd/psp): one
// process however many payment instances run, on 8084. Its books are
// tables of payment_service, reached with the payment service's database
// account; its failpoints come from PSP_FAILPOINTS.
var PSP = Service{Name: "psp", Key: "PSP", DB: "payment_service", Port: 8084}

// PSPBase is a PSP address without its /psp mount (PSP_URL carries it, as
// the payment service uses it): the base that the lab, the viewer and the
// chaos run add /psp/... to.
func PSPBase(u string) string { return strings.TrimSuffix(strings.TrimRight(u, "/"), "/psp") }

// PSPEnv is what the PSP process gets on top of the inherited environment.
func PSPEnv(getenv func(string) string, httpHost string) map[string]string {
	get := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	dsn := mysql.NewConfig()
	dsn.User, dsn.Passwd = getenv("PAYMENT_DB_USER"), getenv("PAYMENT_DB_PASSWORD")
	dsn.Net, dsn.DBName = "tcp", PSP.DB
	dsn.Addr = net.JoinHostPort(get("MYSQL_HOST", "127.0.0.1"), get("MYSQL_PORT", "3306"))
	return map[string]string{
		"HTTP_ADDR":             net.JoinHostPort(httpHost, strconv.Itoa(PSP.Port)),
		"INSTANCE_ID":           PSP.Name,
		"MYSQL_DSN":             dsn.FormatDSN(),
		"MYSQL_CREATE_DATABASE": "false",
		"FAILPOINTS":            getenv("PSP_FAILPOINTS"),
		"DEMO_MODE":             get("DEMO_MODE", "true"),
		"LOG_LEVEL":             get("LOG_LEVEL", "info"),
		// Its charges and refunds want the payment service's key, its
		// switch the admin token when one is set.
		"PSP_TOKEN":   getenv("PSP_TOKEN"),
		"ADMIN_TOKEN": getenv("ADMIN_TOKEN"),
	}
}

// Jaeger stores the spans of scripts/up.sh --tracing in memory and answers
// its query API (GET /api/traces/{id}) on this port; it receives OTLP/HTTP
// on OTLPPort. Built from tools/jaeger (docs/tracing.md).
var Jaeger = Service{Name: "jaeger", Port: 16686}

// OTLPPort is where Jaeger receives spans over OTLP/HTTP.
const OTLPPort = 4318

// OTLPEndpoint is the OTEL_EXPORTER_OTLP_ENDPOINT the processes of a
// stack with tracing get.
func OTLPEndpoint() string { return "http://127.0.0.1:" + strconv.Itoa(OTLPPort) }

// Viewer is the saga viewer (cmd/viewer): the page that draws each order's
// journey and runs the failure lab. It drives the services over HTTP and
// the broker, like scripts/experiment.sh, and runs on demo stacks only.
var Viewer = Service{Name: "viewer", Port: 8080}

// ViewerEnv is what the viewer gets on top of the inherited environment:
// where it listens, the first instances' URLs, and the broker account the
// lab publishes its duplicates with (LAB_AMQP_URL, as for
// scripts/experiment.sh; on a local cluster, guest on every node: a fresh
// node lets guest in from this machine).
//
// VIEWER_TOKEN is what the page's API wants (ViewerToken); ADMIN_TOKEN is
// what the viewer sends the services.
func ViewerEnv(getenv func(string) string, httpHost string, brokers []string) map[string]string {
	env := map[string]string{"VIEWER_ADDR": net.JoinHostPort(httpHost, strconv.Itoa(Viewer.Port)),
		"VIEWER_TOKEN": ViewerToken(getenv), "ADMIN_TOKEN": getenv("ADMIN_TOKEN")}
	for _, s := range Services {
		env[s.Key+"_URL"] = s.URL() // ORDER_URL, INVENTORY_URL, PAYMENT_URL
	}
	env["PSP_URL"] = PSP.URL() // the lab's and the viewer's PSP switches and books
	switch v := getenv("LAB_AMQP_URL"); {
	case v != "":
		env["LAB_AMQP_URL"] = v
	case len(brokers) > 0:
		env["LAB_AMQP_URL"] = AMQPURLs(url.UserPassword("guest", "guest"), brokers)
	default:
		host, port := getenv("RABBITMQ_HOST"), getenv("RABBITMQ_PORT")
		if host == "" {
			host = "127.0.0.1"
		}
		if port == "" {
			port = "5672"
		}
		env["LAB_AMQP_URL"] = "amqp://guest:guest@" + net.JoinHostPort(host, port) + "/"
	}
	return env
}

// ViewerToken is the token of the viewer's API: VIEWER_TOKEN, else
// ADMIN_TOKEN (the viewer's own rule, cmd/viewer). cmd/supervisor makes a
// VIEWER_TOKEN at start when neither is set.
func ViewerToken(getenv func(string) string) string {
	if v := getenv("VIEWER_TOKEN"); v != "" {
		return v
	}
	return getenv("ADMIN_TOKEN")
}

// ViewerURL is the address to open the viewer at: its page, with the
// token the page trades for its cookie.
func ViewerURL(getenv func(string) string) string {
	u := Viewer.URL() + "/"
	if tok := ViewerToken(getenv); tok != "" {
		u += "?token=" + url.QueryEscape(tok)
	}
	return u
}

// DemoMode reports whether the stack runs in demo mode (DEMO_MODE, true
// unless set otherwise), the only mode with failpoints and the viewer.
func DemoMode(getenv func(string) string) bool {
	v, err := strconv.ParseBool(getenv("DEMO_MODE"))
	return err != nil || v
}

// File is .run/stack.json.
type File struct {
	// Supervisor is cmd/supervisor itself: it restarts a process or a broker
	// node that dies by itself; stopping it (SIGTERM) stops everything.
	Supervisor Process   `json:"supervisor"`
	StartedAt  time.Time `json:"started_at"`
	Processes  []Process `json:"processes"`
	// Nodes are the broker nodes the stack started (--rabbit-cluster);
	// none when the services use the machine's broker.
	Nodes []Node `json:"nodes,omitempty"`
	// ViewerURL is the viewer's address with its token (demo mode), for
	// a tool or a person who lost the banner. It is why the file is
	// readable by its owner only.
	ViewerURL string `json:"viewer_url,omitempty"`
}

// Process is one running process of the stack.
type Process struct {
	Name     string `json:"name"`               // file names under .run/: "order", "order-2" for a second instance
	Service  string `json:"service,omitempty"`  // what it runs
	Instance int    `json:"instance,omitempty"` // 1, 2, ...
	PID      int    `json:"pid"`                // the process itself; changes when it is restarted
	URL      string `json:"url,omitempty"`
	Exe      string `json:"exe"`      // its executable: a pid that no longer runs it is not ours
	Log      string `json:"log"`      // its stdout and stderr
	PIDFile  string `json:"pid_file"` // PID, for a human: kill -STOP $(cat .run/order.pid)
	Restarts int    `json:"restarts"` // times it died by itself and was started again
}

// RunsExe reports whether pid still runs exe, as /proc shows it: a pid the
// system has given to another program since is not ours, and a zombie
// runs nothing.
func RunsExe(pid int, exe string) bool {
	if pid <= 0 {
		return false
	}
	proc, err := procfs.NewProc(pid)
	if err != nil {
		return false
	}
	got, err := proc.Executable()
	return err == nil && strings.TrimSuffix(got, " (deleted)") == exe
}

// Node is one RabbitMQ node of the stack's cluster (internal/rabbitnode).
type Node struct {
	Name     string `json:"name"`      // "ordersaga-1@localhost"
	PID      int    `json:"pid"`       // its Erlang VM; changes when it is restarted
	Port     int    `json:"port"`      // AMQP, on 127.0.0.1
	DistPort int    `json:"dist_port"` // Erlang distribution
	Dir      string `json:"dir"`       // its data, logs, config, HOME with the cookie
	Exe      string `json:"exe"`       // the VM's executable (beam.smp): a pid that no longer runs it is not ours
	Log      string `json:"log"`
	PIDFile  string `json:"pid_file"` // written by the node itself
	Restarts int    `json:"restarts"`
}

// Path is the stack file in runDir.
func Path(runDir string) string { return filepath.Join(runDir, "stack.json") }

// Read reads runDir/stack.json; the error wraps fs.ErrNotExist when
// nothing started by scripts/up.sh is running.
func Read(runDir string) (File, error) {
	var f File
	b, err := os.ReadFile(Path(runDir))
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("%s: %w", Path(runDir), err)
	}
	return f, nil
}

// Write replaces runDir/stack.json at once (a reader never sees half of
// it), readable and writable by its owner only: it holds the viewer's
// token.
func Write(runDir string, f File) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	tmp := Path(runDir) + ".tmp"
	_ = os.Remove(tmp) // WriteFile keeps the mode of a file that exists
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, Path(runDir))
}
