// Package stack describes the local stack that scripts/up.sh runs: the
// table of services (name, settings prefix, schema, port), the environment
// each one gets, and .run/stack.json, the machine-readable account of what
// is running (every process with its pid, URL and log) that cmd/stack
// writes and other tools (the failure lab, a chaos tool, a viewer) read.
//
// docker-compose.yml runs the same services; the tests in deploy/ hold it
// against this table and Service.Env.
package stack

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
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

// URL is where the service answers on this machine.
func (s Service) URL() string { return "http://127.0.0.1:" + strconv.Itoa(s.Port) }

// Env is what the service gets on top of the environment it inherits,
// computed from the settings (getenv: the shell's environment, then .env or
// .env.example, as scripts/up.sh exports them). httpHost is the interface
// it listens on.
func (s Service) Env(getenv func(string) string, httpHost string) map[string]string {
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
	amqp := url.URL{Scheme: "amqp", Path: "/",
		User: url.UserPassword(getenv(s.Key+"_AMQP_USER"), getenv(s.Key+"_AMQP_PASSWORD")),
		Host: net.JoinHostPort(get("RABBITMQ_HOST", "127.0.0.1"), get("RABBITMQ_PORT", "5672"))}
	env := map[string]string{
		"HTTP_ADDR": net.JoinHostPort(httpHost, strconv.Itoa(s.Port)),
		"MYSQL_DSN": dsn.FormatDSN(),
		"AMQP_URL":  amqp.String(),
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
		inventory, _ := Lookup("inventory")
		payment, _ := Lookup("payment-fake")
		env["INVENTORY_URL"], env["PAYMENT_URL"] = inventory.URL(), payment.URL()
	case "payment-fake":
		env["PSP_URL"] = s.URL() + "/psp" // the fake PSP is mounted on the payment service's listener
	}
	return env
}

// Viewer is the saga viewer (cmd/viewer): the page that draws each order's
// journey and runs the failure lab. It drives the services over HTTP and
// the broker, like scripts/experiment.sh, and runs on demo stacks only.
var Viewer = Service{Name: "viewer", Port: 8080}

// ViewerEnv is what the viewer gets on top of the inherited environment:
// where it listens, the services' URLs, and the broker account the lab
// publishes its duplicates with (LAB_AMQP_URL, as for scripts/experiment.sh).
func ViewerEnv(getenv func(string) string, httpHost string) map[string]string {
	env := map[string]string{"VIEWER_ADDR": net.JoinHostPort(httpHost, strconv.Itoa(Viewer.Port))}
	for _, s := range Services {
		env[s.Key+"_URL"] = s.URL() // ORDER_URL, INVENTORY_URL, PAYMENT_URL
	}
	if v := getenv("LAB_AMQP_URL"); v != "" {
		env["LAB_AMQP_URL"] = v
	} else {
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

// DemoMode reports whether the stack runs in demo mode (DEMO_MODE, true
// unless set otherwise), the only mode with failpoints and the viewer.
func DemoMode(getenv func(string) string) bool {
	v, err := strconv.ParseBool(getenv("DEMO_MODE"))
	return err != nil || v
}

// File is .run/stack.json.
type File struct {
	// Supervisor is cmd/stack itself: it restarts a process that dies by
	// itself; stopping it (SIGTERM) stops everything.
	Supervisor Process   `json:"supervisor"`
	StartedAt  time.Time `json:"started_at"`
	Processes  []Process `json:"processes"`
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

// Write replaces runDir/stack.json at once (a reader never sees half of it).
func Write(runDir string, f File) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	tmp := Path(runDir) + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, Path(runDir))
}
