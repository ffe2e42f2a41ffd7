// Package deadletter keeps the messages a consumer gave up on, and puts
// them back. Dead letters are not a dustbin: each is kept in the consumer's
// own database with the evidence an operator needs, searchable, until it is
// redriven under its original event_id, or corrected by a new event that
// names it.
//
// # What a dead letter keeps
//
// Per (consumer, event_id): event type, routing key, reason, attempts, first
// and last failure time, status ('dead' or 'redriven'), redriven_at, the
// headers, content type and timestamp, and the raw payload (GET
// /admin/dead-letters?consumer=&event_type=&q=). A new failure of the same
// event adds its attempts, refreshes the reason and makes a redriven row
// dead again. The consume loop (pkg/inbox) records a dead letter for a
// poison message, a message past its retries or older than the replay
// window, a payload mismatch, and every message the broker dead-lettered
// (with the reason and queue of its latest x-death, e.g. "delivery_limit on
// inventory.order-events").
//
// # When the database is down
//
// A dead letter is kept in the consumer's own database, so an outage that
// makes a message fail also refuses its dead letter. Such a message is
// never rejected or dropped: it stays on the broker until the database
// takes it. The consumer answers with a delayed retry through its queue's
// retry tiers, at the capped backoff (at most Backoff.Cap, 1 minute), for
// as long as the outage lasts; each time it comes back it is processed
// first (applied, if the outage was its only problem) and recorded as a
// dead letter only if it still fails. The drain of the broker-side dead
// queue (<queue>.dead: messages past the delivery limit) does the same
// through the dead queue's own retry tiers (<queue>.dead.delay.<tier>).
//
// Why this and not a parking queue: a parking queue is drained by a
// consumer that needs the same database, so during the outage it either
// holds its messages unacked (until the broker's consumer timeout closes its
// channel) or puts them back at once, a hot loop whose returns a quorum
// queue may count against a delivery limit (RabbitMQ 4 sets 20 by default)
// and then drops. The retry tiers already hold a persistent copy for a
// while and bring it back, with no new queue and nothing for an operator
// to do after the outage. The cost is one attempt per message per minute
// while it lasts, logged at error level and counted in
// consumer_retries_total. A reject is never used: the dead queue has no
// dead-letter exchange, so a message rejected from it would be deleted.
//
// One window is left to the broker: a drain that dies while it holds a
// message returns it to <queue>.dead, and RabbitMQ 4.0 to 4.2 count such
// returns against the dead queue's default delivery limit of 20 (3.x has no
// default limit, 4.3 no longer counts them), past which a queue without a
// dead-letter exchange drops the message. The drain never returns a
// message itself (it acks after the record or after the confirmed delayed
// copy), so only twenty crashes while holding the same message reach it.
// And quorum queues dead-letter at most once by default: a broker that
// fails while moving a message to <queue>.dead may lose it. At-least-once
// dead-lettering needs queue arguments (x-dead-letter-strategy, x-overflow)
// that an existing queue cannot take in place; the reconciler is what finds
// an event lost there.
//
// # Redrive
//
// Redriver (POST /admin/dead-letters/redrive, by ids or by filter)
// republishes the original message (same message_id = event_id, type,
// headers without the x- retry and broker headers, timestamp, body) to the
// consumer's own queue through the default exchange, not to the topic
// exchange: other consumers of that event type already processed it. The
// queue is not stored in the row; it comes from the consumer name through
// the service's registry of consumers (process.Runtime.Consume), so a
// namespaced or renamed queue is found as it is now. The row becomes
// 'redriven' only after the publisher confirm, and only if it is still the
// row that was read (UPDATE ... WHERE id = ? AND status = 'dead' AND
// attempts = ?); a returned or nacked publish leaves it dead. Redriving
// twice is safe: the second call selects nothing (the row is no longer
// dead), and if two calls race, the extra copy is a duplicate the inbox
// drops. A redriven event that was already applied changes nothing, for the
// same reason.
//
// # Correction
//
// A redrive is a replay of the same fact, so it keeps the event_id (重投仍使用
// 原事件 ID). A message that can never be processed as it is (its payload is
// wrong, and the producer is fixed since) needs a decision instead: Correct
// (POST /admin/dead-letters/{id}/correct, a corrected payload and a reason)
// sends a new event in its place, with an event_id of its own and the
// header corrects_event_id = the dead event's id (如果确实需要发起新的纠正操作，应分配
// 新事件 ID，并记录它与原事件的关系), to the same queue; the row becomes
// 'corrected' with the correction's event_id and the reason. The new id is
// derived from the dead event and the corrected payload, so sending the
// same correction again (its mark failed) is a duplicate the inbox drops.
//
// # Failure windows and who handles them
//
//	window                              state left             handled by
//	confirmed, before the mark          row still 'dead'       a second redrive: a duplicate the inbox drops
//	two redrives at once                one of them marks it   the mark's WHERE; extra copies are inbox duplicates
//	failed again while being redriven   dead, the new reason   the mark's attempts condition leaves it dead
//	database down, cannot record        message on the broker  delayed retries until the database is back
package deadletter

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// Table is the dead-letter table, for callers that must name it. Only this
// package reads or writes it.
const Table = "dead_letters"

// Letter is a message a consumer gave up on, kept with the evidence an
// operator needs to fix and redrive it.
type Letter struct {
	ID            uint64     `db:"id" json:"id"`
	Consumer      string     `db:"consumer_name" json:"consumer"`
	EventID       string     `db:"event_id" json:"event_id"`
	EventType     string     `db:"event_type" json:"event_type"`
	RoutingKey    string     `db:"routing_key" json:"routing_key"`
	Reason        string     `db:"reason" json:"reason"`
	Attempts      int        `db:"attempts" json:"attempts"`
	FirstFailedAt time.Time  `db:"first_failed_at" json:"first_failed_at"`
	LastFailedAt  time.Time  `db:"last_failed_at" json:"last_failed_at"`
	Status        string     `db:"status" json:"status"`
	RedrivenAt    *time.Time `db:"redriven_at" json:"redriven_at,omitempty"`
	Headers       []byte     `db:"headers" json:"-"`
	Payload       []byte     `db:"payload" json:"-"`
	// The AMQP properties a redrive needs besides the headers (NULL in rows
	// from before they were kept).
	ContentType      *string    `db:"content_type" json:"content_type,omitempty"`
	MessageTimestamp *time.Time `db:"message_timestamp" json:"message_timestamp,omitempty"`
	// A corrected row: the event that corrected it and the operator's
	// reason (Redriver.Correct).
	CorrectionEventID *string `db:"correction_event_id" json:"correction_event_id,omitempty"`
	CorrectionReason  *string `db:"correction_reason" json:"correction_reason,omitempty"`
}

// Dead-letter statuses.
const (
	StatusDead     = "dead"     // waiting for an operator
	StatusRedriven = "redriven" // republished to its consumer's queue; a new failure makes it dead again
	// StatusCorrected: an operator sent a correction in its place (a new
	// event that names it); a new failure of the original makes it dead
	// again.
	StatusCorrected = "corrected"
)

const deadLetterColumns = `SELECT id, consumer_name, event_id, event_type, routing_key, reason, attempts,
  first_failed_at, last_failed_at, status, redriven_at, headers, payload, content_type, message_timestamp,
  correction_event_id, correction_reason
FROM dead_letters`

// Filter selects dead letters: every field set must match, the empty ones
// match everything.
type Filter struct {
	Consumer    string
	Status      string // StatusDead, StatusRedriven or StatusCorrected
	EventType   string
	EventID     string
	Query       string // a substring of the payload or the reason
	Limit       int    // required: at most this many rows
	OldestFirst bool   // by id; otherwise the latest failure first
}

// List returns the dead letters f selects, for the admin list and for a
// redrive by filter.
func List(ctx context.Context, db sqlx.QueryerContext, f Filter) ([]Letter, error) {
	if f.Limit <= 0 {
		return nil, fmt.Errorf("list dead letters: a limit is required")
	}
	q := deadLetterColumns + ` WHERE 1 = 1`
	var args []any
	for _, c := range []struct{ col, v string }{
		{"consumer_name", f.Consumer}, {"status", f.Status}, {"event_type", f.EventType}, {"event_id", f.EventID},
	} {
		if c.v != "" {
			q += ` AND ` + c.col + ` = ?`
			args = append(args, c.v)
		}
	}
	if f.Query != "" {
		q += ` AND (CAST(payload AS CHAR) LIKE ? OR reason LIKE ?)`
		like := "%" + escapeLike(f.Query) + "%"
		args = append(args, like, like)
	}
	if f.OldestFirst {
		q += ` ORDER BY id LIMIT ?`
	} else {
		q += ` ORDER BY last_failed_at DESC, id DESC LIMIT ?`
	}
	args = append(args, f.Limit)
	dls := []Letter{}
	if err := sqlx.SelectContext(ctx, db, &dls, q, args...); err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return dls, nil
}

// FromDelivery is the dead letter of a delivery consumer gives up on, for
// reason: the message as it arrived (id, type, routing key, headers, content
// type, timestamp, body) and its attempts so far.
func FromDelivery(consumer string, d rabbit.Delivery, reason string) Letter {
	headers, _ := json.Marshal(d.Headers)
	contentType := d.ContentType
	l := Letter{Consumer: consumer, EventID: d.MessageId, EventType: d.Type, RoutingKey: d.RoutingKey,
		Reason: reason, Attempts: d.Attempt, FirstFailedAt: d.FirstFailedAt, Headers: headers, Payload: d.Body,
		ContentType: &contentType}
	if !d.Timestamp.IsZero() {
		l.MessageTimestamp = &d.Timestamp
	}
	return l
}

// Record stores (or, for the same consumer and event, updates) a dead
// letter. A repeat adds its attempts and refreshes the reason, the
// message and the last failure time, and makes a redriven row dead again;
// the first failure time stays. Attempts only grow, which is what a redrive
// checks to notice a failure that happened while it was publishing.
func Record(ctx context.Context, db sqlx.ExecerContext, dl Letter) error {
	const q = `INSERT INTO dead_letters
  (consumer_name, event_id, event_type, routing_key, reason, attempts, first_failed_at, last_failed_at,
   headers, payload, content_type, message_timestamp)
VALUES (?, ?, ?, ?, ?, ?, ?, NOW(6), ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE
  attempts = attempts + VALUES(attempts), reason = VALUES(reason), last_failed_at = NOW(6),
  status = 'dead', payload = VALUES(payload), headers = VALUES(headers),
  content_type = VALUES(content_type), message_timestamp = VALUES(message_timestamp)`
	if dl.Attempts < 1 {
		dl.Attempts = 1
	}
	if dl.FirstFailedAt.IsZero() {
		dl.FirstFailedAt = time.Now()
	}
	var headers any
	if len(dl.Headers) > 0 && json.Valid(dl.Headers) {
		headers = dl.Headers
	}
	var contentType, stamp any
	if dl.ContentType != nil {
		contentType = clip(*dl.ContentType, 255)
	}
	if dl.MessageTimestamp != nil && !dl.MessageTimestamp.IsZero() {
		stamp = dl.MessageTimestamp.UTC()
	}
	_, err := db.ExecContext(ctx, q, dl.Consumer, clip(dl.EventID, 191), clip(dl.EventType, 80),
		clip(dl.RoutingKey, 255), clip(dl.Reason, 1000), dl.Attempts, dl.FirstFailedAt.UTC(), headers, dl.Payload,
		contentType, stamp)
	if err != nil {
		return fmt.Errorf("record dead letter %s/%s: %w", dl.Consumer, dl.EventID, err)
	}
	return nil
}

// clip makes s valid UTF-8 (a poison message may carry anything) and cuts
// it to at most n characters.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n])
}

// escapeLike escapes the LIKE wildcards of s.
func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}
