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
}

// RecordDeadLetter stores (or, for the same consumer and event, updates)
// a dead letter. A repeat adds its attempts and refreshes the reason and the
// last failure time; the first failure time stays.
func RecordDeadLetter(ctx context.Context, db sqlx.ExecerContext, dl DeadLetter) error {
	const q = `INSERT INTO dead_letters
  (consumer_name, event_id, event_type, routing_key, reason, attempts, first_failed_at, last_failed_at, headers, payload)
VALUES (?, ?, ?, ?, ?, ?, ?, NOW(6), ?, ?)
ON DUPLICATE KEY UPDATE
  attempts = attempts + VALUES(attempts), reason = VALUES(reason), last_failed_at = NOW(6),
  status = 'dead', payload = VALUES(payload), headers = VALUES(headers)`
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
	_, err := db.ExecContext(ctx, q, dl.Consumer, clip(dl.EventID, 191), clip(dl.EventType, 80),
		clip(dl.RoutingKey, 255), clip(dl.Reason, 1000), dl.Attempts, dl.FirstFailedAt.UTC(), headers, dl.Payload)
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
