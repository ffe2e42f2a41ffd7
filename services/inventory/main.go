// Command inventory runs the inventory service: the stock API and the
// inventory side of the saga (reserve, commit, release). Configuration comes
// from the environment (see README).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/relmsg/ordersaga/services/inventory/inventorysvc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := inventorysvc.Run(ctx, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "inventory:", err)
		os.Exit(1)
	}
}
