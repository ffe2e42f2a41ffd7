// Command chaos runs a bounded mixed load against a running stack while it
// injects seeded faults, heals, waits until the system is at rest, and
// checks that every order ended where it should: it prints a consistency
// report and exits non-zero on any violation. It starts nothing: start the
// stack first with scripts/up.sh -d (any -n and --rabbit-cluster: it reads
// the topology from .run/stack.json).
//
//	go run ./cmd/chaos                                   60 s at 20 orders/s, the default faults
//	go run ./cmd/chaos -duration 90s -rate 40 -seed 7    the long run
//	go run ./cmd/chaos -faults kill,db-lock -json        two kinds, JSON report
//	go run ./cmd/chaos -selftest                         plant one violation per rule, and one into the live read
//
// See docs/chaos.md.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/relmsg/ordersaga/internal/chaos"
	"github.com/relmsg/ordersaga/internal/stack"
	"github.com/relmsg/ordersaga/pkg/base/program"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

func main() {
	program.Main("chaos", func(ctx context.Context) error {
		switch err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); {
		case errors.Is(err, errViolations):
			return program.Exit{Code: 1} // the report lists them
		case errors.Is(err, flag.ErrHelp):
			return nil
		case err != nil:
			return program.Exit{Code: 2, Err: err}
		}
		return nil
	})
}

// errViolations: the run was carried out and some check failed (exit 1;
// any other error exits 2).
var errViolations = errors.New("consistency violations")

const usageText = `usage: go run ./cmd/chaos [flags]

Runs a mixed load against the stack of scripts/up.sh (start it first with
scripts/up.sh -d: this command starts nothing), injects seeded faults,
heals, waits until the system is at rest and prints a consistency report.
Exit status: 0 every check holds, 1 violations, 2 the run could not be done.

The stack's topology comes from -run-dir's stack.json (scripts/up.sh writes
it): every instance of each service (-n 2) and the nodes of a local cluster
(--rabbit-cluster 3). The -*-url flags, when given, name the first instances
instead; without stack.json the run needs them (the services on the
default ports may be another checkout's, and the faults are destructive).

Fault kinds (-faults): kill (SIGKILL an instance; its supervisor restarts it),
stop (SIGSTOP, SIGCONT after 1-3 s), broker-close (the broker closes the
stack's connections), broker-restart (the broker application, of one node of
a cluster, stops for 1-3 s), db-kill (KILL a service's database sessions),
db-lock (FLUSH TABLES WITH READ LOCK for 1-2 s: every database on the server
waits; -db-lock-scope schemas locks only the stack's tables), psp (the fake
PSP loses answers, fails or is slow for 1-3 calls), copy-take (at every
consumer, a delivery and its copy in one take: failpoints and the broker
over AMQP), db-outage (the payment service's database account locked until
deliveries exceed their retry budget, 30-100 s; once per run: the
services need database users of their own, as scripts/up.sh gives them),
node-kill (SIGKILL of a cluster node, in turn the one leading a retry tier
with a retry waiting and the one leading the busiest queue; the supervisor
starts it again: a stack with a cluster only). "default" is kill, stop,
broker-close, db-kill, db-lock, psp, copy-take and db-outage, plus
broker-restart and node-kill when the stack has its own cluster; "all" is
every kind the stack can take.

broker-restart is refused against the machine's shared broker
(127.0.0.1:5672), which other programs use: pass
-allow-system-broker-restart to restart it anyway. A stack on its own
cluster (scripts/up.sh --rabbit-cluster 3) or the test harness's own node
takes every kind.

Flags:
`

type options struct {
	cfg        chaos.Config
	urls       map[string]string
	token      string
	runDir     string
	rootDSN    string
	schemas    string
	users      string
	exchange   string
	amqpURL    string
	allowRest  bool
	lockScope  string
	jsonOut    bool
	selftest   bool
	faultsFlag string
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	env := func(k, d string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return d
	}
	o.urls = map[string]string{}
	orderURL := fs.String("order-url", getenv("ORDER_URL"), "order service (env ORDER_URL; default: stack.json, else http://127.0.0.1:8081)")
	invURL := fs.String("inventory-url", getenv("INVENTORY_URL"), "inventory service (env INVENTORY_URL; default: stack.json, else http://127.0.0.1:8082)")
	payURL := fs.String("payment-url", getenv("PAYMENT_URL"), "payment service (env PAYMENT_URL; default: stack.json, else http://127.0.0.1:8083)")
	pspURL := fs.String("psp-url", getenv("PSP_URL"), "the fake PSP process, without /psp (env PSP_URL; default: stack.json, else http://127.0.0.1:8084)")
	fs.StringVar(&o.token, "admin-token", getenv("ADMIN_TOKEN"), "bearer token of /admin (env ADMIN_TOKEN)")
	seed := fs.Uint64("seed", 0, "seed of the load and the faults (0: random; the report prints it)")
	fs.DurationVar(&o.cfg.Load.Duration, "duration", 60*time.Second, "how long the load and the faults run")
	fs.Float64Var(&o.cfg.Load.Rate, "rate", 20, "orders per second (open loop)")
	fs.IntVar(&o.cfg.Load.WaveSize, "wave-size", 8, "orders racing for the scarce SKU in each wave")
	fs.IntVar(&o.cfg.Load.WaveSupply, "wave-supply", 3, "units of the scarce SKU received before each wave")
	fs.StringVar(&o.faultsFlag, "faults", "default", "fault kinds: a list, default, all or none")
	fs.DurationVar(&o.cfg.Faults.Every, "fault-every", 6*time.Second, "one fault per this much of the run")
	fs.DurationVar(&o.cfg.Quiet, "quiet", 3*time.Second, "at rest: nothing moves for this long")
	fs.DurationVar(&o.cfg.RestTimeout, "rest-timeout", 2*time.Minute, "give up waiting for rest after this long (then check anyway)")
	fs.StringVar(&o.runDir, "run-dir", ".run", "where scripts/up.sh writes stack.json")
	fs.StringVar(&o.rootDSN, "mysql-root-dsn", env("CHAOS_MYSQL_ROOT_DSN", "root@tcp(127.0.0.1:3306)/"),
		"root connection of the database server, used only to inject db-kill and db-lock (env CHAOS_MYSQL_ROOT_DSN)")
	fs.StringVar(&o.schemas, "db-schemas", "order=order_service,inventory=inventory_service,payment=payment_service",
		"each service's schema: db-kill kills the sessions using it")
	fs.StringVar(&o.users, "db-users", "", "each service's database user (order=order_svc,...): db-kill also kills its sessions")
	fs.StringVar(&o.lockScope, "db-lock-scope", "global", "db-lock: global (FLUSH TABLES WITH READ LOCK, every database on the server waits) or schemas (only the tables of -db-schemas)")
	fs.StringVar(&o.exchange, "exchange", "saga.events", "the stack's exchange: broker-close closes the connections named after it")
	fs.StringVar(&o.amqpURL, "amqp-url", env("LAB_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "the broker, to see it back after a restart (env LAB_AMQP_URL)")
	fs.BoolVar(&o.allowRest, "allow-system-broker-restart", false, "allow broker-restart on the shared system broker")
	fs.BoolVar(&o.jsonOut, "json", false, "print the report as JSON")
	fs.BoolVar(&o.selftest, "selftest", false, "plant one violation of each rule into a sample snapshot and show that each is caught, then one into the live read of the stack")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for svc, u := range map[string]string{"order": *orderURL, "inventory": *invURL, "payment": *payURL, "psp": stack.PSPBase(*pspURL)} {
		if u != "" {
			o.urls[svc] = strings.TrimRight(u, "/")
		}
	}
	o.cfg.Seed = *seed
	if o.cfg.Seed == 0 {
		o.cfg.Seed = rand.Uint64N(1_000_000)
	}
	if o.lockScope != "global" && o.lockScope != "schemas" {
		return o, fmt.Errorf("-db-lock-scope %q: want global or schemas", o.lockScope)
	}
	// Checked here, before anything runs; resolved against the stack's
	// topology in run.
	if _, err := faultKinds(o.faultsFlag, true); err != nil {
		return o, err
	}
	return o, nil
}

// faultKinds reads -faults for a stack with or without a cluster of its
// own.
func faultKinds(flag string, cluster bool) ([]chaos.FaultKind, error) {
	if strings.TrimSpace(flag) == "default" {
		flag = "kill,stop,broker-close,db-kill,db-lock,psp,copy-take,db-outage"
		if cluster {
			flag += ",broker-restart,node-kill"
		}
	}
	return chaos.ParseFaultKinds(flag, cluster)
}

// topology fills in what the flags left open from the stack file: every
// instance's URL, the processes, the broker (the stack's own cluster, or
// the machine's shared one) and the fault kinds it can take.
func (o *options) topology(st *chaos.Target) error {
	sf := chaos.StackFile{Dir: o.runDir}
	st.Processes = sf
	f, ferr := sf.Read()
	if ferr != nil && len(o.urls) == 0 {
		// Nothing says whose services answer on scripts/up.sh's ports: on
		// a shared machine they may be another checkout's, and the faults
		// kill, lock and cut.
		return fmt.Errorf("%w: no stack of this checkout to run against; start one with scripts/up.sh -d, or name one with -order-url, -inventory-url, -payment-url and -psp-url", ferr)
	}
	if ferr == nil {
		urls, err := sf.URLs()
		if err != nil {
			return err
		}
		for k, v := range urls {
			if _, set := o.urls[k]; !set {
				o.urls[k] = v
			}
		}
	}
	for svc, def := range map[string]string{"order": "http://127.0.0.1:8081", "inventory": "http://127.0.0.1:8082", "payment": "http://127.0.0.1:8083",
		"psp": "http://127.0.0.1:8084"} {
		if _, set := o.urls[svc]; !set {
			o.urls[svc] = def
		}
	}
	st.URLs = o.urls
	cluster := ferr == nil && len(f.Nodes) > 0
	st.Bus = &chaos.Bus{URLs: o.amqpURL, NS: rabbit.Namespace(strings.TrimSuffix(o.exchange, rabbit.Namespace("").Exchange()))}
	if cluster {
		st.Broker = chaos.StackClusterBroker(f.Nodes)
		var hosts []string
		for _, n := range f.Nodes {
			hosts = append(hosts, "127.0.0.1:"+strconv.Itoa(n.Port))
		}
		st.Bus.URLs = stack.AMQPURLs(url.UserPassword("guest", "guest"), hosts)
	} else {
		st.Broker = chaos.SystemBroker{Exchange: o.exchange, URL: o.amqpURL, AllowRestart: o.allowRest}
	}
	kinds, err := faultKinds(o.faultsFlag, cluster)
	if err != nil {
		return err
	}
	if slices.Contains(kinds, chaos.FaultBrokerRestart) && !cluster && !o.allowRest {
		return errors.New("broker-restart: " + chaos.ErrNotOwned.Error())
	}
	o.cfg.Faults.Kinds = kinds
	return nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	if o.selftest {
		return selftest(ctx, o, stdout, stderr)
	}
	st, closeStack, err := o.stack(ctx, false)
	if err != nil {
		return err
	}
	defer closeStack()
	o.cfg.Progress = stderr
	rep, err := chaos.Run(ctx, o.cfg, st)
	if err != nil {
		return err
	}
	if o.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		rep.Print(stdout)
	}
	if !rep.Passed() {
		return errViolations
	}
	return nil
}

// stack is the stack of the flags and stack.json, with the database's root
// connection when withDB or a fault kind needs it; closeStack lets go of
// its connections.
func (o *options) stack(ctx context.Context, withDB bool) (st chaos.Target, closeStack func(), err error) {
	st = chaos.Target{AdminToken: o.token}
	if err := o.topology(&st); err != nil {
		return st, nil, err
	}
	closers := []func(){st.Bus.Close}
	closeStack = func() {
		for _, c := range closers {
			c()
		}
	}
	if !withDB && !needsDB(o.cfg.Faults.Kinds) {
		return st, closeStack, nil
	}
	db, err := sql.Open("mysql", o.rootDSN)
	if err != nil {
		return st, closeStack, fmt.Errorf("-mysql-root-dsn: %w", err)
	}
	closers = append(closers, func() { db.Close() })
	if err := db.PingContext(ctx); err != nil {
		return st, closeStack, fmt.Errorf("database root connection (needed by db-kill, db-lock, db-outage and the self-test's live read): %w", err)
	}
	sessions, err := sessionsOf(o.schemas, o.users)
	if err != nil {
		return st, closeStack, err
	}
	m := &chaos.MySQL{Root: db, Sessions: sessions}
	if o.lockScope == "schemas" {
		for _, svc := range chaos.Services {
			if s := sessions[svc].Schema; s != "" {
				m.LockSchemas = append(m.LockSchemas, s)
			}
		}
	}
	st.Database = m
	return st, closeStack, nil
}

// selftest plants one violation of each rule into a sample snapshot, then
// one into the live read of the stack: a short run without faults, a
// wrong row written into the inventory's table, read and caught, put back.
func selftest(ctx context.Context, o options, stdout, stderr io.Writer) error {
	clean, results, ok := chaos.SelfTest()
	chaos.PrintSelfTest(stdout, clean, results, ok)
	st, closeStack, err := o.stack(ctx, true)
	if err == nil {
		defer closeStack()
		short := chaos.Config{Seed: o.cfg.Seed, Load: chaos.Load{Rate: 3, Duration: 3 * time.Second, WaveSize: 2, WaveSupply: 1},
			Quiet: 2 * time.Second, RestTimeout: time.Minute, Progress: stderr}
		var rep *chaos.Report
		if rep, err = chaos.Run(ctx, short, st); err == nil && !rep.Passed() {
			err = fmt.Errorf("the short run before the plant is not clean: %v", rep.Violations)
		}
		var p *chaos.LivePlant
		if err == nil {
			p, err = chaos.PlantLive(ctx, rep)
		}
		if p != nil {
			chaos.PrintLivePlant(stdout, p)
			ok = ok && p.Caught()
		}
	}
	if err != nil {
		fmt.Fprintf(stdout, "\nlive read: not carried out: %v\n(the synthetic part above needs nothing; the live part needs the stack: scripts/up.sh -d)\n", err)
		return fmt.Errorf("selftest: the live read: %w", err)
	}
	if !ok {
		return errViolations
	}
	return nil
}

func needsDB(kinds []chaos.FaultKind) bool {
	return slices.Contains(kinds, chaos.FaultDBKill) || slices.Contains(kinds, chaos.FaultDBLock) || slices.Contains(kinds, chaos.FaultDBOutage)
}

// sessionsOf reads "order=order_service,..." lists into each service's
// sessions.
func sessionsOf(schemas, users string) (map[string]chaos.Session, error) {
	out := map[string]chaos.Session{}
	parse := func(list, flagName string, set func(*chaos.Session, string)) error {
		for _, part := range strings.Split(list, ",") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			svc, v, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok || !slices.Contains(chaos.Services, svc) || v == "" {
				return fmt.Errorf("-%s %q: want order=...,inventory=...,payment=...", flagName, list)
			}
			s := out[svc]
			set(&s, v)
			out[svc] = s
		}
		return nil
	}
	if err := parse(schemas, "db-schemas", func(s *chaos.Session, v string) { s.Schema = v }); err != nil {
		return nil, err
	}
	if err := parse(users, "db-users", func(s *chaos.Session, v string) { s.User = v }); err != nil {
		return nil, err
	}
	return out, nil
}
