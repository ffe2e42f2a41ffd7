// Package program is what a program's main function does around its run:
// a context cancelled on SIGINT or SIGTERM, and an exit code and message
// for what the run returns. A package of the standard library alone, so
// that a small command does not link what a service needs.
package program

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Main is the main function of a program that runs until it is done or
// stopped: run's context is cancelled on SIGINT or SIGTERM (Ctrl-C, a
// container stop), so that it shuts down in order. An error it returns is
// printed as "name: error" and the program exits 1, or as an Exit says.
func Main(name string, run func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx)
	if err == nil {
		return
	}
	code, report := exitOf(err)
	if report != nil {
		fmt.Fprintln(os.Stderr, name+":", report)
	}
	os.Exit(code)
}

// exitOf is the exit code of a run that failed with err, and the error to
// print (nil: none).
func exitOf(err error) (int, error) {
	var exit Exit
	if errors.As(err, &exit) {
		return exit.Code, exit.Err
	}
	return 1, err
}

// Exit is an error that ends the program with an exit code of its own. Err
// is printed as any error is; nil when the program has told its outcome
// already (a report, a verdict).
type Exit struct {
	Code int
	Err  error
}

func (e Exit) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return fmt.Sprintf("exit %d: %v", e.Code, e.Err)
}

func (e Exit) Unwrap() error { return e.Err }
