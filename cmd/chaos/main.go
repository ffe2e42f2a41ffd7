// Command chaos runs a bounded mixed load against a running stack while it
// injects seeded faults, heals, waits until the system is at rest, and
// checks that every order ended where it should: it prints a consistency
// report and exits non-zero on any violation. It starts nothing: start the
// stack first with scripts/up.sh -d.
//
//	go run ./cmd/chaos                                   60 s at 20 orders/s, every fault kind but broker-restart
//	go run ./cmd/chaos -duration 90s -rate 40 -seed 7    the long run
//	go run ./cmd/chaos -faults kill,db-lock -json        two kinds, JSON report
//	go run ./cmd/chaos -selftest                         plant one violation per rule, show each is caught
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
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/relmsg/ordersaga/internal/chaos"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, errViolations):
		os.Exit(1)
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case err != nil:
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
}

// errViolations: the run was carried out and some check failed (exit 1;
// any other error exits 2).
var errViolations = errors.New("consistency violations")

const usageText = `usage: go run ./cmd/chaos [flags]

Runs a mixed load against the stack of scripts/up.sh (start it first with
scripts/up.sh -d: this command starts nothing), injects seeded faults,
heals, waits until the system is at rest and prints a consistency report.
Exit status: 0 every check holds, 1 violations, 2 the run could not be done.

Fault kinds (-faults): kill (SIGKILL a service; its supervisor restarts it),
stop (SIGSTOP, SIGCONT after 1-3 s), broker-close (the broker closes the
stack's connections), broker-restart (the broker application stops for 1-3 s),
db-kill (KILL a service's database sessions), db-lock (FLUSH TABLES WITH READ
LOCK for 1-2 s: every database on the server waits; -db-lock-scope schemas
locks only the stack's tables), psp (the fake PSP loses answers, fails or is
slow for 1-3 calls).

broker-restart is refused against scripts/up.sh: its broker is the machine's
shared one (127.0.0.1:5672), which other programs use. Pass
-allow-system-broker-restart to restart it anyway. The test harness
(cmd/chaos/chaos_test.go) runs a broker node of its own, where every kind
is allowed.

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
	orderURL := fs.String("order-url", env("ORDER_URL", "http://127.0.0.1:8081"), "order service (env ORDER_URL)")
	invURL := fs.String("inventory-url", env("INVENTORY_URL", "http://127.0.0.1:8082"), "inventory service (env INVENTORY_URL)")
	payURL := fs.String("payment-url", env("PAYMENT_URL", "http://127.0.0.1:8083"), "payment service (env PAYMENT_URL)")
	fs.StringVar(&o.token, "admin-token", getenv("ADMIN_TOKEN"), "bearer token of /admin (env ADMIN_TOKEN)")
	seed := fs.Uint64("seed", 0, "seed of the load and the faults (0: random; the report prints it)")
	fs.DurationVar(&o.cfg.Load.Duration, "duration", 60*time.Second, "how long the load and the faults run")
	fs.Float64Var(&o.cfg.Load.Rate, "rate", 20, "orders per second (open loop)")
	fs.IntVar(&o.cfg.Load.WaveSize, "wave-size", 8, "orders racing for the scarce SKU in each wave")
	fs.IntVar(&o.cfg.Load.WaveSupply, "wave-supply", 3, "units of the scarce SKU received before each wave")
	fs.StringVar(&o.faultsFlag, "faults", "kill,stop,broker-close,db-kill,db-lock,psp", "fault kinds: a list, all or none")
	fs.DurationVar(&o.cfg.Faults.Every, "fault-every", 6*time.Second, "one fault per this much of the run")
	fs.DurationVar(&o.cfg.Quiet, "quiet", 3*time.Second, "at rest: nothing moves for this long")
	fs.DurationVar(&o.cfg.RestTimeout, "rest-timeout", 2*time.Minute, "give up waiting for rest after this long (then check anyway)")
	fs.StringVar(&o.runDir, "run-dir", ".run", "where scripts/up.sh writes <service>.pid")
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
	fs.BoolVar(&o.selftest, "selftest", false, "plant one violation of each rule into a sample snapshot and show that each is caught")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.urls = map[string]string{"order": strings.TrimRight(*orderURL, "/"), "inventory": strings.TrimRight(*invURL, "/"),
		"payment": strings.TrimRight(*payURL, "/")}
	o.cfg.Seed = *seed
	if o.cfg.Seed == 0 {
		o.cfg.Seed = rand.Uint64N(1_000_000)
	}
	kinds, err := chaos.ParseFaultKinds(o.faultsFlag)
	if err != nil {
		return o, err
	}
	if o.lockScope != "global" && o.lockScope != "schemas" {
		return o, fmt.Errorf("-db-lock-scope %q: want global or schemas", o.lockScope)
	}
	if slices.Contains(kinds, chaos.FaultBrokerRestart) && !o.allowRest {
		return o, errors.New("broker-restart: " + chaos.ErrNotOwned.Error())
	}
	o.cfg.Faults.Kinds = kinds
	return o, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	if o.selftest {
		clean, results, ok := chaos.SelfTest()
		chaos.PrintSelfTest(stdout, clean, results, ok)
		if !ok {
			return errViolations
		}
		return nil
	}
	st := chaos.Stack{URLs: o.urls, AdminToken: o.token, Processes: chaos.RunDir{Dir: o.runDir},
		Broker: chaos.SystemBroker{Exchange: o.exchange, URL: o.amqpURL, AllowRestart: o.allowRest}}
	if needsDB(o.cfg.Faults.Kinds) {
		db, err := sql.Open("mysql", o.rootDSN)
		if err != nil {
			return fmt.Errorf("-mysql-root-dsn: %w", err)
		}
		defer db.Close()
		if err := db.PingContext(ctx); err != nil {
			return fmt.Errorf("database root connection (needed by db-kill and db-lock): %w", err)
		}
		sessions, err := sessionsOf(o.schemas, o.users)
		if err != nil {
			return err
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
	}
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

func needsDB(kinds []chaos.FaultKind) bool {
	return slices.Contains(kinds, chaos.FaultDBKill) || slices.Contains(kinds, chaos.FaultDBLock)
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
