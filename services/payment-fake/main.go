// Command payment-fake runs the payment service: the payment side of the
// saga, with a fake payment provider (PSP) mounted at /psp on the same
// listener. Configuration comes from the environment (see README).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/relmsg/ordersaga/services/payment-fake/paymentsvc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := paymentsvc.Run(ctx, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "payment-fake:", err)
		os.Exit(1)
	}
}
