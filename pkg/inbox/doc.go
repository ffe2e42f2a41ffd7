// Package inbox makes a consumer's business effect happen once per event,
// although RabbitMQ delivers at least once: the inbox row
// (consumer_name, event_id) is inserted in the same transaction as the
// business change and the consumer's own outbox events, so the dedupe record
// and the effect commit or roll back together.
//
// The sequence for every delivery (Consumer.Handle, in consumer.go):
//
//	validate structure and schema_version    (invalid: dead letter, ack)
//	check age against the replay window      (too old and unknown: dead letter, ack)
//	BEGIN
//	  INSERT consumer_inbox (+ payload hash) (duplicate key: same hash -> already processed, ROLLBACK, ACK;
//	                                          other hash -> dead letter + alert, ROLLBACK, ACK)
//	  business change (conditional UPDATEs)
//	  own result events (outbox.Add)
//	COMMIT
//	ACK                                      (only after COMMIT)
//
// This package is the chapter's path and only that: one delivery, one
// transaction. Batches (CONSUMER_BATCH > 1) are a layer over it, in
// pkg/inbox/batch: several deliveries in one transaction when they can,
// this path when they cannot, with a test that proves both decide alike.
//
// The inbox dedupes; it does not order. Each event's ordering strategy
// (pkg/ordering) decides inside the transaction when the INSERT and the
// business change run: at once for a state transition, in version order for
// a delta (one ahead of a gap is parked, committed and acked). Dead letters
// are kept, searched and redriven by pkg/deadletter.
//
// # Outcomes
//
//   - Processed, including a business rejection such as insufficient stock:
//     that is a result event, committed and acked, never retried.
//   - Duplicate: only a duplicate key on the inbox primary key, with the
//     same payload, means "already processed". A duplicate key raised by the
//     business SQL, a lost connection or a deadlock is a failed attempt,
//     rolled back.
//   - Same event_id, different payload (the stored payload_sha256 differs;
//     see PayloadHash): never silently skipped. ErrPayloadMismatch, a dead
//     letter with the reason, an error log and
//     consumer_payload_mismatch_total{consumer} (alert on any increase); the
//     first effect and its inbox row are untouched. For an ExternalHandler
//     the comparison runs before the external call (Seen).
//   - Transient failure (deadlock 1213, lock wait timeout 1205, lost
//     connection, a panic in the handler): rolled back explicitly (a lock wait timeout ends only the
//     statement, not the transaction), then redelivered after
//     min(cap, base*2^attempt), jitter inside it, through a retry queue: the
//     copy waits in a holding queue of its delay tier while the messages
//     behind it are processed, never retried in place or requeued at the
//     head. Past MaxAttempts (8) or MaxRetryAge (15 min since the first
//     failure), whichever comes first: dead letter.
//   - Invalid payload, unknown type, unsupported schema_version, an error
//     wrapped with Permanent, or older than the replay window (ErrTooOld):
//     kept as a dead letter with the reason and the raw payload, then acked.
//     Messages the broker dead-letters (delivery limit) are drained into the
//     same dead letters (HandleBrokerDeadLetter).
//   - A dead letter the database refuses (it is down): the message stays on
//     the broker, retried at the capped backoff until the database takes it;
//     never rejected or dropped (pkg/deadletter, "When the database is down").
//
// # Tracing
//
// Each delivery gets a process span (Consumer.StartProcess), child of and
// linked to the producer's create span from its traceparent header, with
// its transaction as a child span; its decision is a settle span (ack,
// retry, abandon) whose outcome is processed, duplicate, parked,
// payload_mismatch, dead_letter or retry. A redelivered copy is a second
// process span settled duplicate (docs/tracing.md).
//
// # Retention and the replay window
//
// pkg/retention deletes inbox rows older than the replay window
// (INBOX_RETENTION, default 168h). Past that age a missing row no longer
// proves that an event was never applied, so the consumer refuses older
// events (by the AMQP timestamp, the outbox's created_at, else the first
// failure), unless the inbox still has the row (a duplicate). The clocks
// of producer and consumer differ by seconds; the window is days.
//
// # Failure windows and who handles them
//
//	window                                state left              handled by
//	after the inbox INSERT, before COMMIT  nothing (rolled back)   redelivery; a racing delivery waits
//	                                                               on the key, then proceeds or sees 1062
//	after COMMIT, before ACK               effect + inbox row      redelivery is a duplicate: inbox key
//	ACK before COMMIT (the wrong way)      message gone, no effect nothing: that is why we never do it
//	two deliveries at once                 one winner              the primary key (one effect, one row)
//	database down past the attempt budget  message on the broker   delayed retries until it is back
//	a redriven dead letter already applied effect + inbox row      the inbox key: a duplicate, dropped
//	replay after the inbox row expired     no inbox row            the replay window check: dead letter
//
// Failpoints: inbox.after-claim, inbox.after-effect-before-commit,
// inbox.after-commit-before-ack.
//
// Traps checked on MariaDB here: INSERT IGNORE silently truncated an
// over-long event id outside strict mode (we use a plain INSERT and strict
// mode); SET SESSION leaks to whoever gets the pooled connection next
// (session settings live in the DSN, pkg/sqldb).
package inbox
