// Command stack runs the local stack for scripts/up.sh, which first creates
// the schemas and users, builds bin/ and exports the settings of .env (or
// .env.example); run it through scripts/up.sh.
//
//	stack up [-q]   start every process of the table (bin/order, bin/inventory,
//	                bin/payment-fake), wait until each /readyz answers, copy
//	                their logs here as "[order] ..." (-q: do not); Ctrl-C
//	                stops them
//	stack up -d     the same, detached: return once ready, leaving the
//	                supervisor running (its log: .run/stack.log)
//	stack down      stop what up started
//
// The supervisor starts a process again when it dies by itself (the failure
// lab crashes services on purpose), as docker compose's "restart:
// unless-stopped" does. It keeps .run/<name>.log (the previous run's kept as
// .log.1), .run/<name>.pid and .run/stack.json (internal/stack: every
// process with its pid, URL and log, for the tools that read it) up to
// date, and on SIGINT, SIGTERM or SIGHUP stops every process with SIGTERM,
// then SIGKILL after UP_STOP_TIMEOUT.
//
// Settings (environment): UP_HTTP_HOST, the interface the services listen
// on (127.0.0.1: demo mode exposes fault injection); UP_READY_TIMEOUT,
// seconds to wait for /readyz (60); UP_STOP_TIMEOUT, seconds a service has
// to stop before SIGKILL (25; a service shuts down within its
// SHUTDOWN_TIMEOUT, 15 s by default). The services inherit the environment
// plus what internal/stack gives each one.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"
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
}

func loadConfig(getenv func(string) string) (config, error) {
	root, err := os.Getwd()
	if err != nil {
		return config{}, err
	}
	c := config{root: root, runDir: filepath.Join(root, ".run"), httpHost: "127.0.0.1", getenv: getenv}
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
	return c, errors.Join(err1, err2)
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
	if err := fs.Parse(args); err != nil {
		return err
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
	return errors.New("usage: stack up [-d] [-q] | stack down (run it through scripts/up.sh)")
}
