package orderapp

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
)

// Replay or correction (the chapter, 有限重试与死信: 重投仍使用原事件 ID；如果确实需要
// 发起新的纠正操作，应分配新事件 ID，并记录它与原事件的关系).
//
// A participant with no record of an event we sent gets the same event
// again (resend_event): a replay, the same row and event_id, which its
// inbox applies once if it never processed it and drops if it did. But a
// participant can have processed the event and still show no effect: a
// dedupe record committed apart from its business change (the third ACK
// pitfall), a handler that recorded the wrong state. Its inbox then drops
// every replay, forever. So before a replay the reconciler asks the
// participant's inbox (askInbox); if it holds the event, the repair is a
// correction (correct_event): a new event, same type and payload, with a
// new event_id and the order's next version, whose corrects_event_id names
// the original. The participant takes it as a new event and applies it
// through the same conditional update as any event, so a record that
// moved on meanwhile takes nothing from it.

// InboxCheck is what a participant's inbox said about one of our events:
// part of the evidence of a not_consumed or not_applied finding.
type InboxCheck struct {
	Service   string   `json:"service"`
	EventID   string   `json:"event_id"`
	Asked     string   `json:"asked"`
	Processed bool     `json:"processed"`
	Consumers []string `json:"consumers,omitempty"` // the inbox rows' consumers
	Error     string   `json:"error,omitempty"`
}

// askInbox asks the participant whether its inbox has the event. With
// an error, nothing is concluded: the replay stands.
func (a *App) askInbox(ctx context.Context, service, eventID string) *InboxCheck {
	check := &InboxCheck{Service: service, EventID: eventID, Asked: "GET /admin/inbox?event_id=" + eventID}
	rows, err := a.cfg.Peers.Inbox(ctx, service, []string{eventID})
	if err != nil {
		check.Error = err.Error()
		return check
	}
	for _, r := range rows {
		if r.EventID == eventID {
			check.Processed = true
			check.Consumers = append(check.Consumers, r.Consumer)
		}
	}
	return check
}

// classifyWithInbox asks the participant's inbox about the event a
// resend_event verdict would send again, and classifies again with the
// answer: a replay if the participant never processed it, a correction if
// it did.
func (a *App) classifyWithInbox(ctx context.Context, obs order.Observation, v order.Verdict, ev *Evidence) order.Verdict {
	if v.Action != order.ResendEvent || a.cfg.Peers == nil {
		return v
	}
	ev.ParticipantInbox = a.askInbox(ctx, v.Service, v.EventID)
	if ev.ParticipantInbox.Error != "" {
		return v
	}
	obs.Processed = map[string]bool{v.EventID: ev.ParticipantInbox.Processed}
	return order.Classify(obs)
}

// requeue puts our own event back to pending (same row, same event_id) if
// the order and the event are both still as the scan saw them: a replay
// (outbox.Requeue).
func (a *App) requeue(ctx context.Context, c orderdb.Candidate, v order.Verdict, audit *orderdb.Audit, from ...string) error {
	moved := func(o order.Order) string {
		return fmt.Sprintf("the order moved during the scan (now %s): event %s left alone", o.Status, v.EventID)
	}
	return a.repairUnchanged(ctx, c, audit, moved, func(tx *sqlx.Tx, _ order.Order) error {
		done, err := outbox.Requeue(ctx, tx, v.EventID, from...)
		if err != nil {
			return err
		}
		if !done {
			audit.Outcome = OutcomeStateChanged
			audit.Detail = fmt.Sprintf("event %s is no longer %v (a dispatcher took it meanwhile): left alone", v.EventID, from)
		} else {
			audit.Outcome = OutcomeRepaired
			audit.Detail = fmt.Sprintf("event %s put back to pending from %v, same event_id: the dispatcher publishes it again",
				v.EventID, from)
		}
		return orderdb.InsertAudit(ctx, tx, *audit)
	})
}

// correct writes the correction of our event v.EventID, if the order is
// still as the scan saw it: a new row of the same type and payload, a new
// event_id, the order's next version, corrects_event_id the original. The
// original row is left as it is (sent, its history intact).
func (a *App) correct(ctx context.Context, c orderdb.Candidate, v order.Verdict, audit *orderdb.Audit) error {
	moved := func(o order.Order) string {
		return fmt.Sprintf("the order moved during the scan (now %s): event %s not corrected", o.Status, v.EventID)
	}
	return a.repairUnchanged(ctx, c, audit, moved, func(tx *sqlx.Tx, o order.Order) error {
		orig, err := ownRow(ctx, tx, c.ID, v.EventID)
		if err != nil {
			return err
		}
		moved, err := orderdb.AdvanceVersion(ctx, tx, o.ID, o.Version, o.Version+1)
		if err != nil {
			return err
		}
		if !moved {
			return fmt.Errorf("order %d changed under its row lock", o.ID)
		}
		// Schema version: the current one, which every payload of ours is
		// written in (outbox.Row does not carry it).
		ids, err := outbox.Add(ctx, tx, outbox.Event{AggregateID: o.ID, AggregateVersion: o.Version + 1,
			Type: orig.EventType, Payload: json.RawMessage(orig.Payload), Corrects: orig.EventID})
		if err != nil {
			return err
		}
		audit.Outcome = OutcomeRepaired
		audit.Detail = fmt.Sprintf("%s processed %s %s without its effect (its inbox has it, so the same event_id would be dropped): "+
			"correction %s written, the same %s with a new event_id, version %d, corrects_event_id %s",
			v.Service, orig.EventType, orig.EventID, ids[0], orig.EventType, o.Version+1, orig.EventID)
		return orderdb.InsertAudit(ctx, tx, *audit)
	})
}

// ownRow reads one of the order's outbox rows, with its payload.
func ownRow(ctx context.Context, tx *sqlx.Tx, orderID uint64, eventID string) (outbox.Row, error) {
	rows, err := outbox.List(ctx, tx, outbox.Filter{AggregateID: orderID, Limit: 1000})
	if err != nil {
		return outbox.Row{}, err
	}
	for _, r := range rows {
		if r.EventID == eventID {
			return r, nil
		}
	}
	return outbox.Row{}, fmt.Errorf("event %s of order %d is not in the outbox (any more): nothing to correct from", eventID, orderID)
}
