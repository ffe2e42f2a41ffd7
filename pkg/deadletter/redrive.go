package deadletter

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// Publisher is what a redrive needs from *rabbit.Publisher: a confirmed,
// mandatory publish with one answer per message.
type Publisher interface {
	Publish(ctx context.Context, msgs []rabbit.Message, timeout time.Duration) []error
}

// Selection picks the dead letters to redrive: a list of ids, or a filter
// over dead rows (status 'dead') with at least one condition.
type Selection struct {
	IDs       []uint64 `json:"ids,omitempty"`
	Consumer  string   `json:"consumer,omitempty"`
	EventType string   `json:"event_type,omitempty"`
	Query     string   `json:"q,omitempty"`     // substring of the payload or the reason
	Limit     int      `json:"limit,omitempty"` // filter only: at most this many rows [100, max 1000]
}

// ErrBadSelection is returned for a selection Redrive refuses.
var ErrBadSelection = errors.New("bad redrive selection")

// MaxRedrive bounds one redrive call.
const MaxRedrive = 1000

// Check reports what is wrong with s, wrapping ErrBadSelection.
func (s Selection) Check() error {
	filter := s.Consumer != "" || s.EventType != "" || s.Query != ""
	switch {
	case len(s.IDs) > 0 && (filter || s.Limit != 0):
		return fmt.Errorf("%w: give either ids or a filter, not both", ErrBadSelection)
	case len(s.IDs) > MaxRedrive:
		return fmt.Errorf("%w: at most %d ids", ErrBadSelection, MaxRedrive)
	case len(s.IDs) == 0 && !filter:
		return fmt.Errorf("%w: give ids, or a filter with at least one of consumer, event_type, q", ErrBadSelection)
	case s.Limit < 0 || s.Limit > MaxRedrive:
		return fmt.Errorf("%w: limit must be between 1 and %d", ErrBadSelection, MaxRedrive)
	}
	return nil
}

// Outcomes of one dead letter in a redrive.
const (
	OutcomeRedriven      = "redriven"       // published, confirmed, row marked redriven
	OutcomeNotFound      = "not_found"      // no such id
	OutcomeNotDead       = "not_dead"       // already redriven: nothing published
	OutcomeNoQueue       = "no_queue"       // this service runs no consumer of that name
	OutcomePublishFailed = "publish_failed" // returned, nacked or unconfirmed: row left dead
	OutcomeChanged       = "changed"        // published, but the row changed meanwhile (see Detail)
)

// RedriveResult is what happened to one dead letter.
type RedriveResult struct {
	ID        uint64 `json:"id"`
	Consumer  string `json:"consumer,omitempty"`
	EventID   string `json:"event_id,omitempty"`
	EventType string `json:"event_type,omitempty"`
	Queue     string `json:"queue,omitempty"`
	Outcome   string `json:"outcome"`
	Detail    string `json:"detail,omitempty"`
	// CorrectionEventID is the event_id of a correction (Correct).
	CorrectionEventID string `json:"correction_event_id,omitempty"`
}

// Redriver republishes dead letters to their consumer's queue.
//
// A redrive is a replay: the same event, under the same event_id, so the
// consumer's inbox applies it once and drops any copy of it; an operator's
// decision to send something else in its place is a correction, with an
// event_id of its own (Correct).
//
// A dead letter goes back to the queue of the consumer that gave up on it,
// through the default exchange (routing key = queue name), not to the topic
// exchange: the other consumers bound to that event type already processed
// it, and a redrive is about this consumer only. The row does not store its
// queue; QueueOf maps the consumer name (the inbox key, a constant) to the
// queue this service consumes it from (pkg/compose/process registers both in
// Runtime.Consume), so a renamed or namespaced queue is found as it is now.
//
// The message is the original: message_id = event_id, type, content type,
// timestamp, headers (minus the broker's and the retry path's x- headers,
// so it starts with fresh attempts) and body, byte for byte. The row is
// marked 'redriven' only after the broker confirmed the publish, and only if
// it is still the row that was read (status 'dead' and the same attempts):
// a second call, or the message failing again before the mark, leaves what
// the other party wrote. Publishing twice (two calls at once, or a crash
// before the mark) is harmless: the consumer's inbox drops the duplicate.
type Redriver struct {
	DB        *sqlx.DB
	Publisher Publisher
	QueueOf   func(consumer string) (queue string, ok bool)
	// ConfirmTimeout bounds the wait for confirms of one batch [5s].
	ConfirmTimeout time.Duration
	Log            *slog.Logger
	// OnRedriven is called with the consumer name of every row marked
	// redriven (the consumer metrics count it); nil: nothing.
	OnRedriven func(consumer string)
}

// HeaderRedriveOf carries the dead letter id on a redriven message.
const HeaderRedriveOf = "x-redrive-of"

const redriveBatch = 100

// Redrive republishes the selected dead letters and reports one result per
// row (per requested id for an id list, in the order given).
func (r *Redriver) Redrive(ctx context.Context, sel Selection) ([]RedriveResult, error) {
	if err := sel.Check(); err != nil {
		return nil, err
	}
	rows, err := r.load(ctx, sel)
	if err != nil {
		return nil, err
	}
	log := r.logger()
	results := make([]RedriveResult, 0, len(rows))
	type pending struct {
		idx int
		dl  Letter
		msg rabbit.Message
	}
	var batch []pending
	flush := func() {
		if len(batch) == 0 {
			return
		}
		msgs := make([]rabbit.Message, len(batch))
		for i, p := range batch {
			msgs[i] = p.msg
		}
		timeout := r.ConfirmTimeout
		if timeout <= 0 {
			timeout = 5 * time.Second
		}
		errs := r.Publisher.Publish(ctx, msgs, timeout)
		for i, p := range batch {
			res := &results[p.idx]
			if errs[i] != nil {
				res.Outcome, res.Detail = OutcomePublishFailed, errs[i].Error()+"; the row stays dead"
				log.Warn("redrive publish failed", "dead_letter_id", p.dl.ID, "event_id", p.dl.EventID, "err", errs[i])
				continue
			}
			r.mark(ctx, res, p.dl)
			if res.Outcome == OutcomeRedriven {
				log.Warn("operator redrove a dead letter", "dead_letter_id", p.dl.ID, "consumer", p.dl.Consumer,
					"event_id", p.dl.EventID, "queue", res.Queue)
				if r.OnRedriven != nil {
					r.OnRedriven(p.dl.Consumer)
				}
			}
		}
		batch = batch[:0]
	}
	inBatch := map[string]bool{} // the publisher matches returns by message id
	for _, row := range rows {
		res := RedriveResult{ID: row.id}
		if row.dl == nil {
			res.Outcome = OutcomeNotFound
			results = append(results, res)
			continue
		}
		dl := *row.dl
		res.Consumer, res.EventID, res.EventType = dl.Consumer, dl.EventID, dl.EventType
		if dl.Status != StatusDead {
			res.Outcome, res.Detail = OutcomeNotDead, "status "+dl.Status+"; nothing published"
			results = append(results, res)
			continue
		}
		queue, ok := r.QueueOf(dl.Consumer)
		if !ok {
			res.Outcome, res.Detail = OutcomeNoQueue, "this service runs no consumer "+dl.Consumer
			results = append(results, res)
			continue
		}
		res.Queue = queue
		results = append(results, res)
		if len(batch) == redriveBatch || inBatch[dl.EventID] {
			flush()
			clear(inBatch)
		}
		inBatch[dl.EventID] = true
		batch = append(batch, pending{idx: len(results) - 1, dl: dl, msg: RedriveMessage(dl, queue)})
	}
	flush()
	return results, nil
}

func (r *Redriver) logger() *slog.Logger {
	if r.Log == nil {
		return slog.Default()
	}
	return r.Log
}

// mark sets the row redriven if it is still the row that was published.
func (r *Redriver) mark(ctx context.Context, res *RedriveResult, dl Letter) {
	const q = `UPDATE dead_letters SET status = 'redriven', redriven_at = NOW(6)
WHERE id = ? AND status = 'dead' AND attempts = ?`
	ctx = context.WithoutCancel(ctx) // published: record it even if the caller went away
	result, err := r.DB.ExecContext(ctx, q, dl.ID, dl.Attempts)
	if !marked(res, result, err, OutcomeRedriven, "a second redrive is a duplicate the inbox drops") {
		return
	}
	var now struct {
		Status   string `db:"status"`
		Attempts int    `db:"attempts"`
	}
	if err := r.DB.GetContext(ctx, &now, `SELECT status, attempts FROM dead_letters WHERE id = ?`, dl.ID); err != nil {
		res.Detail = "published, but the row changed meanwhile"
		return
	}
	if now.Status == StatusDead {
		res.Detail = "published, and it failed again before it could be marked: the row stays dead with the new reason"
	} else {
		res.Detail = "published, but another call redrove it at the same time: the consumer's inbox drops the duplicate"
	}
}

// marked sets res from the answer of the UPDATE that records a published
// row (redriven or corrected): outcome done when it changed the row, else
// OutcomeChanged, the row left dead. again says why publishing once more is
// harmless. It reports whether the row had changed meanwhile, for the
// caller to tell how in res.Detail.
func marked(res *RedriveResult, result sql.Result, err error, done, again string) (changedMeanwhile bool) {
	if err != nil {
		res.Outcome = OutcomeChanged
		res.Detail = "published, but marking the row failed (it stays dead; " + again + "): " + err.Error()
		return false
	}
	if n, _ := result.RowsAffected(); n == 1 {
		res.Outcome = done
		return false
	}
	res.Outcome = OutcomeChanged
	return true
}

type loaded struct {
	id uint64
	dl *Letter
}

func (r *Redriver) load(ctx context.Context, sel Selection) ([]loaded, error) {
	if len(sel.IDs) > 0 {
		var dls []Letter
		if err := sqldb.SelectIn(ctx, r.DB, &dls, deadLetterColumns+` WHERE id IN (?)`, sel.IDs); err != nil {
			return nil, fmt.Errorf("load dead letters: %w", err)
		}
		byID := make(map[uint64]*Letter, len(dls))
		for i := range dls {
			byID[dls[i].ID] = &dls[i]
		}
		out := make([]loaded, 0, len(sel.IDs))
		seen := map[uint64]bool{}
		for _, id := range sel.IDs {
			if seen[id] {
				continue
			}
			seen[id] = true
			out = append(out, loaded{id: id, dl: byID[id]})
		}
		return out, nil
	}
	limit := sel.Limit
	if limit == 0 {
		limit = 100
	}
	dls, err := List(ctx, r.DB, Filter{Consumer: sel.Consumer, Status: StatusDead,
		EventType: sel.EventType, Query: sel.Query, Limit: limit, OldestFirst: true})
	if err != nil {
		return nil, err
	}
	out := make([]loaded, len(dls))
	for i := range dls {
		out[i] = loaded{id: dls[i].ID, dl: &dls[i]}
	}
	return out, nil
}

// RedriveMessage rebuilds the original message of dl, addressed to queue
// through the default exchange.
func RedriveMessage(dl Letter, queue string) rabbit.Message {
	contentType := "application/json" // rows from before content_type was kept
	if dl.ContentType != nil {
		contentType = *dl.ContentType
	}
	stamp := dl.FirstFailedAt // the event is at least as old as its first failure
	if dl.MessageTimestamp != nil {
		stamp = *dl.MessageTimestamp
	}
	headers := HeadersFromJSON(dl.Headers)
	for k := range headers {
		// The broker's x-death family and the retry path's attempt counter
		// and first-failure time: a redrive starts with fresh attempts.
		if strings.HasPrefix(k, "x-") {
			delete(headers, k)
		}
	}
	headers[HeaderRedriveOf] = int64(dl.ID)
	return rabbit.Message{
		Exchange:   "",
		RoutingKey: queue,
		Publishing: amqp.Publishing{
			MessageId:    dl.EventID,
			Type:         dl.EventType,
			ContentType:  contentType,
			DeliveryMode: amqp.Persistent,
			Timestamp:    stamp.UTC(),
			Headers:      headers,
			Body:         dl.Payload,
		},
	}
}

// HeadersFromJSON turns the stored headers (an amqp.Table marshalled to
// JSON) back into a table. Whole numbers come back as int64, as they were
// sent (aggregate_version, schema_version): a float64 would make the
// message invalid. Anything unreadable gives an empty table.
func HeadersFromJSON(data []byte) amqp.Table {
	t := amqp.Table{}
	if len(data) == 0 {
		return t
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return t
	}
	for k, v := range m {
		t[k] = tableValue(v)
	}
	return t
}

func tableValue(v any) any {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		t := amqp.Table{}
		for k, e := range x {
			t[k] = tableValue(e)
		}
		return t
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = tableValue(e)
		}
		return out
	default:
		return v // string, bool, nil
	}
}
