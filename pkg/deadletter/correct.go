package deadletter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// Correction is an operator's decision about one dead letter: instead of
// sending it again as it was (Redrive, a replay under its own event_id),
// send a corrected event in its place, with an event_id of its own and a
// corrects_event_id header that names the dead one (the chapter, 有限重试与死信:
// 重投仍使用原事件 ID；如果确实需要发起新的纠正操作，应分配新事件 ID，并记录它与原事件的关系).
// The usual case is a payload the consumer can never process (a producer
// bug, fixed since) whose facts an operator has established.
type Correction struct {
	// Payload is the corrected payload: a JSON value other than the dead
	// letter's (to send the message as it was, redrive it).
	Payload json.RawMessage `json:"payload"`
	// Reason says why (required): kept on the row, and logged.
	Reason string `json:"reason"`
}

// ErrBadCorrection is returned for a correction Correct refuses.
var ErrBadCorrection = errors.New("bad correction")

// OutcomeCorrected: the correction was published and confirmed, and the row
// marked corrected.
const OutcomeCorrected = "corrected"

// Correct publishes a correction of dead letter id to its consumer's queue
// (the default exchange, as a redrive) and marks the row 'corrected' with
// the correction's event_id and the reason, once the broker confirmed it
// and only if it is still the row that was read.
//
// The correction is the dead message with three changes: its payload, its
// message_id (a new event_id), and its timestamp (now: it is a new event,
// which the consumer's replay window must not count from the original's
// time); its headers keep the aggregate, version and schema of the
// original, and add corrects_event_id = the dead letter's event_id. The
// new event_id is derived from the consumer, the dead event_id and the
// corrected payload (a UUIDv5), so the same correction sent twice (its
// mark failed, the operator tried again) is one event to the consumer's
// inbox, while another corrected payload is another decision.
func (r *Redriver) Correct(ctx context.Context, id uint64, c Correction) (RedriveResult, error) {
	res := RedriveResult{ID: id}
	if strings.TrimSpace(c.Reason) == "" {
		return res, fmt.Errorf("%w: give a reason", ErrBadCorrection)
	}
	var fixed bytes.Buffer
	if len(c.Payload) == 0 || json.Compact(&fixed, c.Payload) != nil {
		return res, fmt.Errorf("%w: the payload must be a JSON value", ErrBadCorrection)
	}
	rows, err := r.load(ctx, Selection{IDs: []uint64{id}})
	if err != nil {
		return res, err
	}
	if len(rows) != 1 || rows[0].dl == nil {
		res.Outcome = OutcomeNotFound
		return res, nil
	}
	dl := *rows[0].dl
	res.Consumer, res.EventID, res.EventType = dl.Consumer, dl.EventID, dl.EventType
	if dl.Status != StatusDead {
		res.Outcome, res.Detail = OutcomeNotDead, "status "+dl.Status+"; nothing published"
		return res, nil
	}
	if _, err := uuid.Parse(dl.EventID); err != nil || len(dl.EventID) != 36 {
		return res, fmt.Errorf("%w: the dead letter's event_id %q is not a UUID, so no correction can name it", ErrBadCorrection, dl.EventID)
	}
	var orig bytes.Buffer
	if json.Compact(&orig, dl.Payload) == nil && bytes.Equal(orig.Bytes(), fixed.Bytes()) {
		return res, fmt.Errorf("%w: the payload is the dead letter's own; to send it as it was, redrive it", ErrBadCorrection)
	}
	queue, ok := r.QueueOf(dl.Consumer)
	if !ok {
		res.Outcome, res.Detail = OutcomeNoQueue, "this service runs no consumer "+dl.Consumer
		return res, nil
	}
	res.Queue = queue
	msg := CorrectionMessage(dl, queue, fixed.Bytes(), time.Now())
	res.CorrectionEventID = msg.Publishing.MessageId
	timeout := r.ConfirmTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	log := r.logger()
	if err := r.Publisher.Publish(ctx, []rabbit.Message{msg}, timeout)[0]; err != nil {
		res.Outcome, res.Detail = OutcomePublishFailed, err.Error()+"; the row stays dead"
		log.Warn("correction publish failed", "dead_letter_id", dl.ID, "event_id", dl.EventID, "err", err)
		return res, nil
	}
	r.markCorrected(ctx, &res, dl, c.Reason)
	if res.Outcome == OutcomeCorrected {
		log.Warn("operator corrected a dead letter", "dead_letter_id", dl.ID, "consumer", dl.Consumer,
			"event_id", dl.EventID, "correction_event_id", res.CorrectionEventID, "queue", queue,
			"reason", c.Reason, "payload", string(fixed.Bytes()))
	}
	return res, nil
}

// correctionSpace is the UUIDv5 namespace of corrections' event ids.
var correctionSpace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/relmsg/ordersaga/dead-letter-correction"))

// CorrectionMessage is the correction of dl with payload, made at now,
// addressed to queue through the default exchange (see Correct).
func CorrectionMessage(dl Letter, queue string, payload []byte, now time.Time) rabbit.Message {
	m := RedriveMessage(dl, queue)
	m.Publishing.MessageId = uuid.NewSHA1(correctionSpace,
		[]byte(dl.Consumer+"\x00"+dl.EventID+"\x00"+string(payload))).String()
	m.Publishing.Headers[events.HeaderCorrectsEventID] = dl.EventID
	m.Publishing.Timestamp = now.UTC()
	m.Publishing.Body = payload
	return m
}

// markCorrected sets the row corrected if it is still the row that was
// read.
func (r *Redriver) markCorrected(ctx context.Context, res *RedriveResult, dl Letter, reason string) {
	const q = `UPDATE dead_letters
SET status = 'corrected', redriven_at = NOW(6), correction_event_id = ?, correction_reason = ?
WHERE id = ? AND status = 'dead' AND attempts = ?`
	ctx = context.WithoutCancel(ctx) // published: record it even if the caller went away
	result, err := r.DB.ExecContext(ctx, q, res.CorrectionEventID, clip(reason, 1000), dl.ID, dl.Attempts)
	if marked(res, result, err, OutcomeCorrected, "the same correction again is a duplicate the inbox drops") {
		res.Detail = "published, but the row changed meanwhile (it failed again, or another call redrove or corrected it)"
	}
}
