package rabbit

import amqp "github.com/rabbitmq/amqp091-go"

// Internals the package's external tests reach (the usual export_test.go):
// they use rabbittest, which imports this package, so they cannot live in it.

// CurrentConn is the connection Run holds now (nil: none).
func (c *Conn) CurrentConn() *amqp.Connection {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn
}

// ChannelOn is channelOn: a channel of conn, which marks conn down if it
// has closed.
func (c *Conn) ChannelOn(conn *amqp.Connection) (*amqp.Channel, error) { return c.channelOn(conn) }
