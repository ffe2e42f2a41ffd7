// Command order runs the order service: the order API and the order side
// of the saga. Configuration comes from the environment (see README).
package main

import (
	"context"
	"os"

	"github.com/relmsg/ordersaga/pkg/base/program"
	"github.com/relmsg/ordersaga/services/order/ordersvc"
)

func main() {
	program.Main("order", func(ctx context.Context) error { return ordersvc.Run(ctx, os.Getenv, os.Stdout) })
}
