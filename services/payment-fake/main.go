// Command payment-fake runs the payment service: the payment side of the
// saga, with a fake payment provider (PSP) mounted at /psp on the same
// listener. Configuration comes from the environment (see README).
package main

import (
	"context"
	"os"

	"github.com/relmsg/ordersaga/pkg/base/program"
	"github.com/relmsg/ordersaga/services/payment-fake/paymentsvc"
)

func main() {
	program.Main("payment-fake", func(ctx context.Context) error { return paymentsvc.Run(ctx, os.Getenv, os.Stdout) })
}
