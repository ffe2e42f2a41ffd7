package rabbit

// Namespace prefixes every exchange and queue name. It is empty in
// production (names are exactly those of docs/contract.md: "saga.events",
// "inventory.order-events"); each test uses its own so tests can run in
// parallel on one broker without seeing each other's messages.
type Namespace string

// Exchange is the topic exchange all events are published to.
func (n Namespace) Exchange() string { return string(n) + "saga.events" }

// DeadLetterExchange receives what queues dead-letter.
func (n Namespace) DeadLetterExchange() string { return string(n) + "saga.dlx" }

// Queue prefixes a queue name.
func (n Namespace) Queue(name string) string { return string(n) + name }

// Topology is n's exchanges with queues, each queue's name prefixed: what
// a service declares, its queues given by the names of docs/contract.md.
func (n Namespace) Topology(queues ...Queue) Topology {
	topo := Topology{Exchange: n.Exchange(), DeadLetterExchange: n.DeadLetterExchange()}
	for _, q := range queues {
		q.Name = n.Queue(q.Name)
		topo.Queues = append(topo.Queues, q)
	}
	return topo
}
