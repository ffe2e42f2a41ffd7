// Package inbox makes a consumer's business effect happen once per event,
// although RabbitMQ delivers at least once: the inbox row
// (consumer_name, event_id) is inserted in the same transaction as the
// business change and the consumer's own outbox events, so the dedupe record
// and the effect commit or roll back together.
//
// The sequence for every delivery (Consumer.Handle):
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
// # Outcomes
//
//   - Processed, including a business rejection such as insufficient stock:
//     that is a result event, committed and acked, never retried.
//   - Duplicate: only a duplicate key on the inbox primary key, with the
//     same payload, means "already processed". A duplicate key raised by the
//     business SQL, a lost connection or a deadlock is a failed attempt,
//     rolled back.
//   - Same event_id, different payload: an alert and a dead letter, never
//     silently skipped (below).
//   - Transient failure (deadlock 1213, lock wait timeout 1205, lost
//     connection): rolled back explicitly (a lock wait timeout ends only the
//     statement, not the transaction), then redelivered after
//     min(cap, base*2^attempt), jitter inside it, through a retry queue, never
//     requeued at once. Past MaxAttempts (8) or MaxRetryAge (15 min since
//     the first failure), whichever comes first: dead letter.
//   - Invalid payload, unknown type, unsupported schema_version, or an error
//     wrapped with Permanent: stored in dead_letters with the reason and the
//     raw payload, then acked. Messages the broker dead-letters (delivery
//     limit reached) are drained into the same table.
//   - Older than the replay window: a dead letter (below).
//
// # Retries do not block other orders
//
// A failed message leaves the queue: the consume loop publishes a copy to a
// holding queue of its delay tier (confirmed), then acks the original; the
// copy expires back into the queue with its attempt count and first-failure
// time in headers. Messages behind it are processed meanwhile, by every
// worker. Nothing is retried in place and nothing is requeued at the head.
//
// # Same event_id, different payload
//
// ClaimPayload stores the SHA-256 of the message body in
// consumer_inbox.payload_sha256 (the chapter's three columns stay as they
// are). A JSON body is hashed in canonical form (keys sorted, no
// insignificant whitespace), so a copy that was only re-encoded on the way
// (a tool that pretty-prints, a JSON column that reorders keys) is still a
// duplicate; a different value anywhere is a different payload. When the INSERT hits the duplicate key, the stored hash is read in
// the same transaction (the other row is committed, or the INSERT would
// still be waiting) and compared: equal is ErrAlreadyProcessed; different
// is ErrPayloadMismatch, which Handle turns into a dead letter with the
// reason "same event_id, different payload", an error log and the metric
// consumer_payload_mismatch_total{consumer} (alert on any increase). The
// original effect and its inbox row are untouched. A NULL hash (a row
// written before the column existed, or by Claim, which has no payload)
// counts as a match. For an ExternalHandler the same comparison runs before
// the external call (Seen), so a mismatch never reaches the provider.
//
// # Dead letters and redrive
//
// dead_letters keeps, per (consumer, event_id): event type, routing key,
// reason, attempts, first and last failure time, status ('dead' or
// 'redriven'), redriven_at, the headers, content type and timestamp, and the
// raw payload, searchable (GET /admin/dead-letters?consumer=&event_type=&q=).
// A new failure of the same event adds its attempts, refreshes the reason
// and makes a redriven row dead again.
//
// Redriver (POST /admin/dead-letters/redrive, by ids or by filter)
// republishes the original message (same message_id = event_id, type,
// headers without the x- retry and broker headers, timestamp, body) to the
// consumer's own queue through the default exchange, not to the topic
// exchange: other consumers of that event type already processed it. The
// queue is not stored in the row; it comes from the consumer name through
// the service's registry of consumers (service.Runtime.Consume), so a
// namespaced or renamed queue is found as it is now. The row becomes
// 'redriven' only after the publisher confirm, and only if it is still the
// row that was read (UPDATE ... WHERE id = ? AND status = 'dead' AND
// attempts = ?); a returned or nacked publish leaves it dead. Redriving
// twice is safe: the second call selects nothing (the row is no longer
// dead), and if two calls race, the extra copy is a duplicate the inbox
// drops. A redriven event that was already applied changes nothing, for the
// same reason.
//
// # Retention and the replay window
//
// pkg/retention deletes inbox rows older than the replay window
// (INBOX_RETENTION, default 168h). Past that age a missing inbox row no
// longer proves that an event was never applied, so the consumer refuses
// events older than Config.ReplayWindow (the same setting): by the AMQP
// timestamp (the outbox's created_at), or, for a message without one, its
// first failure time. If the inbox still has the row, the message is the
// usual duplicate; otherwise it is a dead letter with the reason "older than
// the inbox replay window (...): its inbox row may have been deleted; apply
// by hand after checking" (ErrTooOld). The producer's and the consumer's
// clocks differ by seconds; the window is days.
//
// # Failure windows and who handles them
//
//	window                                state left              handled by
//	after the inbox INSERT, before COMMIT  nothing (rolled back)   redelivery; a racing delivery waits
//	                                                               on the key, then proceeds or sees 1062
//	after COMMIT, before ACK               effect + inbox row      redelivery is a duplicate: inbox key
//	ACK before COMMIT (the wrong way)      message gone, no effect nothing: that is why we never do it
//	two deliveries at once                 one winner              the primary key (one effect, one row)
//	redrive confirmed, before the mark     row still 'dead'        a second redrive: a duplicate the inbox drops
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
