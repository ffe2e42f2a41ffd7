// Package outbox is the chapter's transactional outbox: an event is written
// into outbox_events on the same connection and in the same transaction as
// the business change, and a dispatcher publishes committed events to
// RabbitMQ afterwards. It turns "the business committed but left no
// reliable intent to send" into a row that recovery jobs can always find.
//
// # What it guarantees
//
//   - An event exists if and only if its business change committed (Add
//     takes the caller's *sqlx.Tx).
//   - Every committed event is published at least once, with message_id =
//     event_id, persistent, mandatory, with the contract's headers; re-sends keep
//     the event_id, so consumers can deduplicate.
//   - A replay is the same row: a re-send after a failed attempt, and
//     Requeue (an operator's retry, the reconciler's resend) keep the
//     event_id. A correction, a new decision about an event already issued,
//     is a new row with a new event_id whose corrects_event_id names the
//     event it corrects (Event.Corrects), sent as the header of that name;
//     consumers take it as a new event.
//   - A row becomes 'sent' only after a publisher confirm (ack, and no
//     mandatory return) and only under the claim token that published it.
//   - Retrying ends at the first of two bounds (有限次数、遵守总期限):
//     MaxAttempts failed attempts, or Deadline since the first attempt
//     (database time). The row becomes 'failed': kept, counted in
//     outbox_events{status="failed"} and outbox_marked_failed_total (alert),
//     never deleted silently. An expired lease is a failed attempt like a
//     lost confirm: it backs off the same way, and counts toward both bounds.
//
// It does not guarantee exactly-once delivery or per-aggregate order: a
// crash between the confirm and the mark re-sends (consumers must use an
// inbox), and SKIP LOCKED claims let a later event of an order overtake an
// earlier one that is locked or backing off (consumers must check state
// transitions or versions).
//
// # The claim, and the index it uses
//
// One short transaction: SELECT ... FOR UPDATE SKIP LOCKED the due rows,
// UPDATE exactly those ids (the IN list is built for the rows selected) to
// 'sending' with a fresh claim token, a lease measured in database time and
// attempts+1, COMMIT. Publishing happens after the commit, outside any
// transaction, so no lock is held during network I/O.
//
// The chapter's claim orders by (created_at, event_id) under the index
// ix_dispatch (status, next_attempt_at, created_at). With a range condition
// on next_attempt_at, that ORDER BY is not the index order, so the server
// must read every due row and sort them before applying LIMIT: measured
// about 6x slower on a 50k-row backlog. We keep the chapter's table and
// index exactly and order by (next_attempt_at, created_at) instead: that is
// ix_dispatch's own order after the status equality, so the server walks the
// index and stops after LIMIT rows, with no filesort, whatever the backlog.
// Semantically it is "oldest due first": a fresh event has next_attempt_at
// = created_at, and a retried one waits its turn at its retry time.
// Sessions run READ COMMITTED (pkg/sqldb), so the locking read takes no gap
// locks and never blocks the INSERT of a new event.
//
// # Failure windows and who handles them
//
//	window                              state left                 handled by
//	before the local commit             nothing                    the caller's retry (idempotency key)
//	after commit, before claim          'pending'                  wake-up, else the fallback poll
//	after claim, before publish         'sending' with a lease     RecoverExpired once the lease expires:
//	                                                               a failed attempt, backed off
//	published, confirm lost             'sending' / back to        re-send with the same event_id
//	                                    'pending' (timeout, nack)
//	confirmed, before mark-sent         'sending'                  lease recovery re-sends: a duplicate
//	                                                               delivery the consumer's inbox drops
//	unroutable (mandatory return)       back to 'pending'          backoff, then 'failed' + alert
//	a slow dispatcher marks late        someone else's claim       mark under claim token: 0 rows
//
// Failpoints: outbox.dispatch.after-claim,
// outbox.dispatch.after-publish-before-confirm,
// outbox.dispatch.after-confirm-before-mark.
//
// # Latency without a hot loop
//
// After a commit that wrote events, the caller calls Dispatcher.Wake; the
// workers then claim at once. A poller runs one cheap indexed EXISTS query
// per PollInterval for events this process was not told about (written by
// another instance, or due again after a backoff) and wakes the workers
// only when something is due. Lease recovery runs every RecoverInterval.
package outbox
