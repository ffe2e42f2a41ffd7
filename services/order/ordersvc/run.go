// Package ordersvc is the order service's composition root. main calls Run;
// the end-to-end tests call it too, to run the service in-process.
package ordersvc

import (
	"context"
	"fmt"
	"io"

	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/service"
	"github.com/relmsg/ordersaga/services/order/internal/orderamqp"
	"github.com/relmsg/ordersaga/services/order/internal/orderapp"
	"github.com/relmsg/ordersaga/services/order/internal/orderhttp"
)

// Run runs the order service until ctx ends.
func Run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	env := service.NewEnv(getenv)
	cfg := service.Load(env, "order", ":8081", "order_service")
	if err := env.Err(); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}

	ctx, rt, err := service.Start(ctx, cfg, "order", orderamqp.Topology, stdout)
	if err != nil {
		return err
	}
	app := orderapp.New(rt.DB, rt.Outbox.Wake, rt.Log)

	app.WrongWay(cfg.WrongWay, rt.PublishNow)

	consumer := rt.InboxConfig(orderamqp.ConsumerName)
	consumer.Handlers = orderamqp.Handlers(app)
	rt.Consume(orderamqp.Queue, inbox.NewConsumer(consumer))

	router := rt.Router()
	orderhttp.Routes(router, app, rt.Log)
	return rt.Serve(ctx, router)
}
