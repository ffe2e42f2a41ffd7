// Command inventory runs the inventory service: the stock API and the
// inventory side of the saga (reserve, commit, release). Configuration comes
// from the environment (see README).
package main

import (
	"context"
	"os"

	"github.com/relmsg/ordersaga/pkg/base/program"
	"github.com/relmsg/ordersaga/services/inventory/inventorysvc"
)

func main() {
	program.Main("inventory", func(ctx context.Context) error { return inventorysvc.Run(ctx, os.Getenv, os.Stdout) })
}
