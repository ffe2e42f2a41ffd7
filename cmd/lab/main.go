// Command lab runs the failure lab's experiments against a running stack
// (scripts/up.sh or docker compose) and prints the evidence: the rows before
// the fault, after it and after recovery, the checks, and a verdict naming
// the constraint or recovery job that held. scripts/experiment.sh runs it.
//
//	go run ./cmd/lab list
//	go run ./cmd/lab duplicate-window
//	go run ./cmd/lab -wrong-way atomic-commit
//	go run ./cmd/lab all
//	go run ./cmd/lab -instance order-2 claim-crash
//
// On a stack of several instances (scripts/up.sh -n 2), failpoints and
// wrong-way switches go to every instance of the service an experiment
// names, or with -instance to that one instance only (its INSTANCE_ID,
// as .run/stack.json lists it); each line of the evidence says which.
//
// An experiment that waits for a setting of the stack waits as long as the
// setting says, even past -patience: delta-overdue waits for PARK_DEADLINE.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/relmsg/ordersaga/internal/lab"
	"github.com/relmsg/ordersaga/pkg/base/program"
)

func main() {
	program.Main("lab", func(ctx context.Context) error { return run(ctx, os.Args[1:], os.Getenv, os.Stdout) })
}

func run(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("lab", flag.ContinueOnError)
	wrong := fs.Bool("wrong-way", false, "run the experiment with its wrong-way switch on, to see the anomaly")
	patience := fs.Duration("patience", 2*time.Minute, "how long to wait for recovery")
	instance := fs.String("instance", lab.AllInstances, "where failpoints and wrong-way switches go: all, or one INSTANCE_ID (order-2)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: scripts/experiment.sh [-wrong-way] [-instance all|<instance id>] <experiment>|list|all")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("name one experiment (or list, or all)")
	}
	name := fs.Arg(0)
	if name == "list" {
		for _, s := range lab.Scenarios {
			ww := ""
			if s.WrongWay != "" {
				ww = "  (-wrong-way: " + string(s.WrongWay) + ")"
			}
			fmt.Fprintf(out, "%-21s %s -> %s%s\n", s.Name, s.Window, s.Holds, ww)
		}
		return nil
	}
	var todo []lab.Scenario
	if name == "all" {
		todo = lab.Scenarios
	} else {
		s, ok := lab.Find(name)
		if !ok {
			return fmt.Errorf("no experiment %q (try: scripts/experiment.sh list)", name)
		}
		todo = []lab.Scenario{s}
	}

	t := lab.NewLiveTarget(getenv)
	for _, svc := range lab.Services {
		if err := t.Ready(ctx, svc); err != nil {
			return fmt.Errorf("%s at %s is not ready (start the stack with scripts/up.sh or docker compose up): %w", svc, t.URL(svc), err)
		}
	}
	defer t.Close()
	if err := lab.CheckInstance(t, *instance); err != nil {
		return err
	}
	l := lab.New(t, getenv("ADMIN_TOKEN"), out)
	l.Patience = *patience
	l.Instance = *instance
	for _, svc := range lab.Services {
		if in := t.Instances(svc); len(in) > 1 {
			fmt.Fprintf(out, "%d instances of %s; failpoints and switches go to %s\n", len(in), svc, *instance)
		}
	}
	failed := 0
	for _, s := range todo {
		if *wrong && s.WrongWay == "" {
			fmt.Fprintf(out, "\n=== %s has no wrong-way switch; skipped\n", s.Name)
			continue
		}
		rep := l.Run(ctx, s, *wrong)
		rep.Print(out)
		if !rep.Passed() {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d experiment(s) did not pass", failed)
	}
	return nil
}
