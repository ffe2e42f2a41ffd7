// Package batch runs several deliveries of one consumer in one transaction:
// a layer over the chapter's inbox (pkg/inbox), which it calls for
// everything it does not do itself. It is a departure from the chapter made
// for speed (CONSUMER_BATCH > 1; docs/performance.md has the measurements),
// and it must decide exactly as the chapter's path does, one delivery at a
// time: the differential tests of the three services (differential_test.go
// next to each service's bindings) run generated sequences of deliveries
// both ways on the real database and compare every row, every event
// written, every external call and every decision.
//
// # How a take of deliveries is processed
//
// The consume loop hands over the deliveries already waiting (never
// waiting for more). In delivery order, they are cut into runs:
//
//   - a delivery that needs more than the plain path (invalid, too old, a
//     delta or snapshot event, a redelivery, a type without a handler)
//     ends the run before it and goes down the chapter's path alone
//     (inbox.Consumer.HandleArrived);
//   - a second copy of an event already in the run ends the run, and goes
//     alone after it: the inbox key then finds it processed;
//   - an event of an aggregate already in the run, where either of the two
//     calls out (an external handler), ends the run and starts the next:
//     its call must see the state the first one's record left.
//
// A run of one goes down the chapter's path too. A longer run is one
// transaction, and each step keeps a rule of the chapter:
//
//	external calls, concurrently, no transaction open   (外部调用不放在事务里)
//	BEGIN
//	  INSERT consumer_inbox, one row per event          (去重记录与业务变更同一事务)
//	  each event's handler, in delivery order           (the business change)
//	  the handlers' shared writes (history, stock)      (before COMMIT, in key order)
//	  outbox.Add, every result event                    (业务变更与 outbox 同一事务)
//	COMMIT
//	ACK each delivery                                   (先提交，再 ACK)
//
// If anything in the transaction fails (an inbox duplicate, a handler's
// error, a deadlock, a panic, a shared write that does not fit), it rolls
// back whole and every delivery of the run goes down the chapter's path,
// in order, each with its own outcome: only an inbox primary-key duplicate
// ever means "processed", and only the chapter's path says so. An external
// call made before the rollback is made again there with the same
// idempotency key, which the external system answers the same way.
//
// # Why the outcome is the same
//
// Handlers are written once, against a service's store S: the chapter's
// path runs them over its transaction (Direct), the batch over the batch's
// (Config.Open). What a store may do differently in a batch is only when a
// write happens, never what it decides: result events and shared rows are
// written at the end (Tx.Emit, Tx.BeforeCommit); a row read for the whole
// batch (LockOnce) is handed only to the first event of its aggregate,
// which no earlier handler of the batch has touched; a shared write whose
// answer a handler needs to decide (a late sale's stock) makes the pending
// shared writes first. A shared write that cannot be made in the end (the
// stock of the batch's holds is not there) fails the batch, and the
// chapter's path then decides each event alone.
//
// # Tracing
//
// A run of several deliveries has a span of its own for its transaction,
// linked to every message's creation context (the messaging conventions'
// batch processing), and each delivery its own process span, child of
// its producer's create span and linked to the run's span; the events a
// handler emits keep that delivery's span as their create span's parent
// (Tx.Emit). A run that rolls back ends its deliveries' spans, and the
// chapter's path gives each a process span of its own (docs/tracing.md).
//
// Every delivery has its own time bound (Config.Timeout): each external
// call, the batch transaction, and each delivery of a fallback. Counters
// and log lines of the batch's work are written after its COMMIT (Tx.Log,
// sqldb.AfterCommit), so a rolled-back batch reports nothing it did.
package batch
