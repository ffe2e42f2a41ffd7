// Command psp runs the fake payment provider (PSP) as its own process, on
// :8084 by default: the one PSP every payment-fake instance calls through
// PSP_URL. Configuration comes from the environment (docs/operations.md).
package main

import (
	"context"
	"os"

	"github.com/relmsg/ordersaga/pkg/base/program"
	"github.com/relmsg/ordersaga/services/payment-fake/pspsvc"
)

func main() {
	program.Main("psp", func(ctx context.Context) error { return pspsvc.Run(ctx, os.Getenv, os.Stdout) })
}
