// Package inventorysvc is the inventory service's composition root. main
// calls Run; the end-to-end tests call it too, to run the service in-process.
package inventorysvc

import (
	"context"
	"fmt"
	"io"

	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/service"
	"github.com/relmsg/ordersaga/pkg/wrongway"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventoryamqp"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventoryapp"
	"github.com/relmsg/ordersaga/services/inventory/internal/inventoryhttp"
)

// Run runs the inventory service until ctx ends.
func Run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	env := service.NewEnv(getenv)
	cfg := service.Load(env, "inventory", ":8082", "inventory_service")
	if err := env.Err(); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}

	ctx, rt, err := service.Start(ctx, cfg, "inventory", inventoryamqp.Topology, stdout)
	if err != nil {
		return err
	}
	app := inventoryapp.New(rt.DB, rt.Log)

	if cfg.WrongWay.On(wrongway.IgnoreOrder) {
		app.IgnoreOrder()
	}

	consumer := rt.InboxConfig(inventoryamqp.ConsumerName)
	consumer.Handlers = inventoryamqp.Handlers(app)
	rt.Consume(inventoryamqp.Queue, inbox.NewConsumer(consumer))

	router := rt.Router()
	inventoryhttp.Routes(router, app, rt.Log)
	return rt.Serve(ctx, router)
}
