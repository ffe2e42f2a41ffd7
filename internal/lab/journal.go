package lab

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// What a service logged about one event, order or claim, read from its
// journal (GET /debug/journal, demo mode): the evidence of what it did with
// the experiment's own event (a copy dropped by the inbox, a retry, a claim
// lost), which a service-wide counter cannot give once other orders flow.
// The messages are the services' own log lines (pkg/inbox, pkg/outbox,
// pkg/ordering); a process that restarted starts an empty journal.
const (
	logProcessed     = "event processed"
	logDuplicate     = "duplicate delivery suppressed by the inbox"
	logRetry         = "event failed; retrying later"
	logParked        = "delta event parked"
	logAttemptFailed = "attempt failed; will retry"
	logOutboxFailed  = "ALERT: outbox event failed"
	logClaimLost     = "claim lost before mark-sent"
	logOverdue       = "ALERT: a parked delta event's gap did not fill"
)

// JournalRecord is one log record a service kept about an event, an order
// or a claim.
type JournalRecord struct {
	At    time.Time         `json:"at"`
	Level string            `json:"level"`
	Msg   string            `json:"msg"`
	Attrs map[string]string `json:"attrs"`
}

// journal reads svc's records about id from every instance of svc.
func (l *Lab) journal(ctx context.Context, svc, id string) ([]JournalRecord, error) {
	var all []JournalRecord
	for _, i := range instancesOf(l.T, svc) {
		var out struct {
			Records []JournalRecord `json:"records"`
		}
		code, _, err := l.callAt(ctx, i.ID, i.URL, http.MethodGet, "/debug/journal?id="+url.QueryEscape(id), nil, nil, &out)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%s GET /debug/journal: status %d (is DEMO_MODE on?)", i.ID, code)
		}
		if err != nil {
			return nil, err
		}
		all = append(all, out.Records...)
	}
	return all, nil
}

// Told is what one service's log says about one id.
type Told []JournalRecord

// told reads what svc logged about id; an error leaves it empty, and the
// check that reads it fails with what it found.
func (l *Lab) told(ctx context.Context, svc, id string) Told {
	recs, _ := l.journal(ctx, svc, id)
	return recs
}

// count counts the records whose message starts with msg, logged by
// consumer (any consumer if "").
func (t Told) count(consumer, msg string) int {
	n := 0
	for _, r := range t {
		if strings.HasPrefix(r.Msg, msg) && (consumer == "" || r.Attrs["consumer"] == consumer) {
			n++
		}
	}
	return n
}

// first returns the first record whose message starts with msg, logged by
// consumer (any if "").
func (t Told) first(consumer, msg string) (JournalRecord, bool) {
	for _, r := range t {
		if strings.HasPrefix(r.Msg, msg) && (consumer == "" || r.Attrs["consumer"] == consumer) {
			return r, true
		}
	}
	return JournalRecord{}, false
}

// inbox is the inbox's outcomes for consumer: processed, dropped as a
// duplicate.
func (t Told) inbox(consumer string) (processed, dropped int) {
	return t.count(consumer, logProcessed), t.count(consumer, logDuplicate)
}

// errs lists the distinct err attributes of the records whose message
// starts with msg.
func (t Told) errs(msg string) string {
	var out []string
	for _, r := range t {
		if e := r.Attrs["err"]; strings.HasPrefix(r.Msg, msg) && e != "" && !strings.Contains(strings.Join(out, "\n"), e) {
			out = append(out, e)
		}
	}
	return orNone(strings.Join(out, "; "))
}

// waitLogged waits until svc has logged msg about id (by consumer, if
// set) at least n times, and returns what it logged.
func (l *Lab) waitLogged(ctx context.Context, what, svc, consumer, msg, id string, n int) (Told, error) {
	var t Told
	err := l.waitFor(ctx, what, func() (bool, error) {
		recs, err := l.journal(ctx, svc, id)
		t = recs
		return t.count(consumer, msg) >= n, err
	})
	return t, err
}
