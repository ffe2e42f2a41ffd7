// Package instance names the running process among the instances of its
// service (INSTANCE_ID: "order-2" under scripts/up.sh -n 2, host and pid
// by default). process.Start puts the name in the root context; the rows
// that record who acted (the outbox claim, the inbox claim, the order's
// history, the reconciler's audit) read it from the context they are
// written with, like the trace id, so no signature changes for it and two
// instances run in one test process keep their own names.
package instance

import (
	"context"
	"fmt"
	"os"
)

type key struct{}

// With returns ctx carrying the instance's name.
func With(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, key{}, id)
}

// ID is the instance's name carried by ctx, "" when there is none (tests
// that call a store directly).
func ID(ctx context.Context) string {
	id, _ := ctx.Value(key{}).(string)
	return id
}

// Default is the name of an instance started without INSTANCE_ID: the
// host name and the process id ("web-3-12345"), unique on a machine and
// readable in a log.
func Default() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}
