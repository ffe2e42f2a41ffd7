package inbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jmoiron/sqlx"
)

// DeadLetter is a message a consumer gave up on, kept with the evidence an
// operator needs to fix and redrive it.
type DeadLetter struct {
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
}

// Dead-letter statuses.
const (
	StatusDead     = "dead"     // waiting for an operator
	StatusRedriven = "redriven" // republished to its consumer's queue; a new failure makes it dead again
)

const deadLetterColumns = `SELECT id, consumer_name, event_id, event_type, routing_key, reason, attempts,
  first_failed_at, last_failed_at, status, redriven_at, headers, payload, content_type, message_timestamp
FROM dead_letters`

// DeadLetterFilter selects dead letters: every field set must match, the
// empty ones match everything.
type DeadLetterFilter struct {
	Consumer    string
	Status      string // StatusDead or StatusRedriven
	EventType   string
	EventID     string
	Query       string // a substring of the payload or the reason
	Limit       int    // required: at most this many rows
	OldestFirst bool   // by id; otherwise the latest failure first
}

// ListDeadLetters returns the dead letters f selects, for the admin list
// and for a redrive by filter.
func ListDeadLetters(ctx context.Context, db sqlx.QueryerContext, f DeadLetterFilter) ([]DeadLetter, error) {
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
		like := "%" + EscapeLike(f.Query) + "%"
		args = append(args, like, like)
	}
	if f.OldestFirst {
		q += ` ORDER BY id LIMIT ?`
	} else {
		q += ` ORDER BY last_failed_at DESC, id DESC LIMIT ?`
	}
	args = append(args, f.Limit)
	dls := []DeadLetter{}
	if err := sqlx.SelectContext(ctx, db, &dls, q, args...); err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return dls, nil
}

// RecordDeadLetter stores (or, for the same consumer and event, updates)
// a dead letter. A repeat adds its attempts and refreshes the reason, the
// message and the last failure time, and makes a redriven row dead again;
// the first failure time stays. Attempts only grow, which is what a redrive
// checks to notice a failure that happened while it was publishing.
func RecordDeadLetter(ctx context.Context, db sqlx.ExecerContext, dl DeadLetter) error {
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
