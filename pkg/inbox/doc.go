// Package inbox makes a consumer's business effect happen once per event,
// although RabbitMQ delivers at least once: the inbox row
// (consumer_name, event_id) is inserted in the same transaction as the
// business change and the consumer's own outbox events, so the dedupe record
// and the effect commit or roll back together.
//
// The sequence for every delivery (Consumer.Handle):
//
//	validate structure and schema_version    (invalid: dead letter, ack)
//	BEGIN
//	  INSERT consumer_inbox                  (duplicate key: already processed -> ROLLBACK, ACK)
//	  business change (conditional UPDATEs)
//	  own result events (outbox.Add)
//	COMMIT
//	ACK                                      (only after COMMIT)
//
// # Outcomes
//
//   - Processed, including a business rejection such as insufficient stock:
//     that is a result event, committed and acked, never retried.
//   - Duplicate: only a duplicate key on the inbox primary key means
//     "already processed". A duplicate key raised by the business SQL, a
//     lost connection or a deadlock is a failed attempt, rolled back.
//   - Transient failure (deadlock 1213, lock wait timeout 1205, lost
//     connection): rolled back explicitly (a lock wait timeout ends only the
//     statement, not the transaction), then redelivered after
//     min(cap, base*2^attempt) plus jitter through a retry queue, never
//     requeued at once. Past MaxAttempts or MaxRetryAge: dead letter.
//   - Invalid payload, unknown type, unsupported schema_version, or an error
//     wrapped with Permanent: stored in dead_letters with the reason and the
//     raw payload, then acked. Messages the broker dead-letters (delivery
//     limit reached) are drained into the same table.
//
// # Failure windows and who handles them
//
//	window                                state left              handled by
//	after the inbox INSERT, before COMMIT  nothing (rolled back)   redelivery; a racing delivery waits
//	                                                               on the key, then proceeds or sees 1062
//	after COMMIT, before ACK               effect + inbox row      redelivery is a duplicate: inbox key
//	ACK before COMMIT (the wrong way)      message gone, no effect nothing: that is why we never do it
//	two deliveries at once                 one winner              the primary key (one effect, one row)
//
// Failpoints: inbox.after-claim, inbox.after-effect-before-commit,
// inbox.after-commit-before-ack.
//
// Traps checked on MariaDB here: INSERT IGNORE silently truncated an
// over-long event id outside strict mode (we use a plain INSERT and strict
// mode); SET SESSION leaks to whoever gets the pooled connection next
// (session settings live in the DSN, pkg/sqldb).
package inbox
