// Command psp runs the fake payment provider (PSP) as its own process, on
// :8084 by default: the one PSP every payment-fake instance calls through
// PSP_URL. Configuration comes from the environment (docs/operations.md).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/relmsg/ordersaga/services/payment-fake/pspsvc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := pspsvc.Run(ctx, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "psp:", err)
		os.Exit(1)
	}
}
