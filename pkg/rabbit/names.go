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
