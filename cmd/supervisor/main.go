// Command stack runs the local stack for scripts/up.sh, which first creates
// the schemas and users, builds bin/ and exports the settings of .env (or
// .env.example); run it through scripts/up.sh.
//
//	supervisor up [-q]   start every process of the table (bin/order, bin/inventory,
//	                bin/payment-fake, then the viewer in demo mode), wait
//	                until each /readyz answers, copy their logs here as
//	                "[order] ..." (-q: do not); Ctrl-C stops them
//	supervisor up -d     the same, detached: return once ready, leaving the
//	                supervisor running (its log: .run/stack.log)
//	supervisor up -n 2   two instances of every service: instance k listens on
//	                the service's port + 100*(k-1) (8181, 8182, 8183) and is
//	                named <service>-k under .run/ (the first keeps the
//	                service's name: .run/order.log, .run/order-2.log)
//	supervisor up -rabbit-cluster 3
//	                first start a RabbitMQ cluster of three private nodes
//	                (internal/rabbitnode) on 5701-5703, data under
//	                .run/rabbit/, the service users imported from
//	                deploy/provision.sh, and point every service at all of
//	                them (AMQP_URL lists the nodes, rotated per instance);
//	                the machine's broker is left alone
//	supervisor up -tracing
//	                first start Jaeger (bin/jaeger, built from tools/jaeger):
//	                spans over OTLP/HTTP on :4318, kept in memory, its query
//	                API on :16686; every process gets
//	                OTEL_EXPORTER_OTLP_ENDPOINT and the viewer JAEGER_URL
//	                (docs/tracing.md)
//	supervisor down      stop what up started, broker nodes included
//
// The supervisor starts a process or a broker node again when it dies by
// itself (the failure lab crashes services on purpose, the chaos run kills
// nodes), as docker compose's "restart: unless-stopped" does. It keeps
// .run/<name>.log (the previous run's kept as .log.1), .run/<name>.pid and
// .run/stack.json (internal/stack: every process and node with its pid,
// URL or port and log, for the tools that read it) up to date, and on
// SIGINT, SIGTERM or SIGHUP stops every process with SIGTERM, then SIGKILL
// after UP_STOP_TIMEOUT, then the broker nodes the same way.
//
// Tokens: the viewer's (VIEWER_TOKEN, else ADMIN_TOKEN) and the PSP's key
// (PSP_TOKEN, given to the PSP and the payment instances only) are made
// here, at random, when not set, once per start; the banner prints the
// viewer's URL with its token, and .run/stack.json (mode 0600) keeps it.
//
// Settings (environment): UP_HTTP_HOST, the interface the services listen
// on (127.0.0.1: demo mode exposes fault injection); UP_READY_TIMEOUT,
// seconds to wait for /readyz (60); UP_STOP_TIMEOUT, seconds a service has
// to stop before SIGKILL (25; a service shuts down within its
// SHUTDOWN_TIMEOUT, 15 s by default). The services inherit the environment
// plus what internal/stack gives each one.
package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/relmsg/ordersaga/internal/stack"
)

func main() {
	if err := run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "[up] error: %v\n", err)
		os.Exit(1)
	}
}

// config is what every command needs.
type config struct {
	root         string // the repository: bin/ and .run/ are under it
	runDir       string
	httpHost     string
	readyTimeout time.Duration
	stopTimeout  time.Duration
	getenv       func(string) string

	// made are the tokens made at start (madeTokens); getenv answers them.
	// A detached supervisor gets them in its environment, so it uses the
	// ones the banner shows.
	made map[string]string

	tracing     bool // -tracing: run Jaeger (bin/jaeger) and send it every process's spans
	instances   int  // of every service (-n)
	clusterSize int  // nodes of the local RabbitMQ cluster (-rabbit-cluster); 0: the machine's broker
	clusterPort int  // AMQP port of node 1 (stack.ClusterPort; tests use free ones)
	// nodeName names node k of the cluster (stack.NodeName; a test names
	// its own, so that a developer's running cluster keeps its names:
	// Erlang allows one node of a name per host).
	nodeName func(k int) string
}

func loadConfig(getenv func(string) string) (config, error) {
	root, err := os.Getwd()
	if err != nil {
		return config{}, err
	}
	c := config{root: root, runDir: filepath.Join(root, ".run"), httpHost: "127.0.0.1", getenv: getenv,
		instances: 1, clusterPort: stack.ClusterPort, nodeName: stack.NodeName}
	if h := getenv("UP_HTTP_HOST"); h != "" {
		c.httpHost = h
	}
	seconds := func(key string, def int) (time.Duration, error) {
		v := getenv(key)
		if v == "" {
			return time.Duration(def) * time.Second, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%s=%q: want a number of seconds", key, v)
		}
		return time.Duration(n) * time.Second, nil
	}
	var err1, err2 error
	c.readyTimeout, err1 = seconds("UP_READY_TIMEOUT", 60)
	c.stopTimeout, err2 = seconds("UP_STOP_TIMEOUT", 25)
	c.made = madeTokens(getenv)
	c.getenv = func(k string) string {
		if v, ok := c.made[k]; ok {
			return v
		}
		return getenv(k)
	}
	return c, errors.Join(err1, err2)
}

// madeTokens makes the tokens the environment does not set: the viewer's
// (unless VIEWER_TOKEN or ADMIN_TOKEN is set) and the PSP's key.
func madeTokens(getenv func(string) string) map[string]string {
	made := map[string]string{}
	if stack.ViewerToken(getenv) == "" {
		made["VIEWER_TOKEN"] = randomToken()
	}
	if getenv("PSP_TOKEN") == "" {
		made["PSP_TOKEN"] = randomToken()
	}
	return made
}

// randomToken is 256 random bits, URL-safe.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail (it panics first)
	return base64.RawURLEncoding.EncodeToString(b)
}

func run(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	con := newConsole(stdout, stderr)
	cmd := ""
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("stack "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	detach := fs.Bool("d", false, "detach: return once every service is ready")
	quiet := fs.Bool("q", false, "do not copy the services' logs to the terminal")
	fs.IntVar(&cfg.instances, "n", 1, "instances of every service (1-9)")
	fs.BoolVar(&cfg.tracing, "tracing", false, "run Jaeger (bin/jaeger, OTLP/HTTP on :4318, query API on :16686) and export every process's spans to it")
	fs.IntVar(&cfg.clusterSize, "rabbit-cluster", 0, "start a local RabbitMQ cluster of this many nodes (1-9) on 5701..., and use it instead of the machine's broker")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	// Instance 10 of the order service would listen on 9081, next to the
	// viewer and the services' own range; nine is plenty on one machine.
	if cfg.instances < 1 || cfg.instances > 9 {
		return fmt.Errorf("-n %d: want 1 to 9 instances", cfg.instances)
	}
	if cfg.clusterSize < 0 || cfg.clusterSize > 9 {
		return fmt.Errorf("-rabbit-cluster %d: want 1 to 9 nodes (0: the machine's broker)", cfg.clusterSize)
	}
	switch {
	case cmd == "up" && *detach:
		return upDetached(cfg, con)
	case cmd == "up":
		return upForeground(cfg, con, *quiet)
	case cmd == "supervise": // the detached supervisor that up -d starts
		return superviseDetached(cfg, con)
	case cmd == "down":
		return down(cfg, con)
	}
	return errors.New("usage: supervisor up [-d] [-q] [-n N] [-rabbit-cluster N] [-tracing] | supervisor down (run it through scripts/up.sh)")
}
