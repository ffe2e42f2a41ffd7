package process

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/relmsg/ordersaga/pkg/base/web"
)

// The journal (demo mode only): each process keeps its latest log records
// that name an event, an order or a claim, whatever their level, and
// answers GET /debug/journal?id=<event_id, order_id or claim_token>,...
// with the records that name one of them. The failure lab reads it to see
// what a service did with its own event (a copy dropped by the inbox, a
// retry, a claim lost) rather than a service-wide counter, which every
// other order moves too. The records are the log lines themselves: the
// journal adds no outcome of its own, and a process that restarts starts
// with an empty one.

// journalKeys are the attributes a record must carry one of to be kept,
// and that a query matches.
var journalKeys = []string{"event_id", "order_id", "claim_token"}

// journalSize bounds the records kept: at the load of docs/performance.md
// (about 130 orders a second) a service logs a few hundred such records a
// second, so the last half minute or more stays readable.
const journalSize = 1 << 14

// JournalRecord is one log record the journal kept.
type JournalRecord struct {
	At    time.Time         `json:"at"`
	Level string            `json:"level"`
	Msg   string            `json:"msg"`
	Attrs map[string]string `json:"attrs"`
}

// Journal is a bounded ring of log records; safe for concurrent use.
type Journal struct {
	mu   sync.Mutex
	recs []JournalRecord
	next int // where the next record goes once recs is full
	size int
}

// NewJournal returns a journal that keeps the last size records (0: the
// default).
func NewJournal(size int) *Journal {
	if size <= 0 {
		size = journalSize
	}
	return &Journal{size: size}
}

func (j *Journal) add(r JournalRecord) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.recs) < j.size {
		j.recs = append(j.recs, r)
		return
	}
	j.recs[j.next] = r
	j.next = (j.next + 1) % j.size
}

// Find returns the kept records that name one of ids, oldest first.
func (j *Journal) Find(ids ...string) []JournalRecord {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []JournalRecord
	for k := range j.recs {
		r := j.recs[(j.next+k)%len(j.recs)]
		for _, key := range journalKeys {
			if v, ok := r.Attrs[key]; ok && slices.Contains(ids, v) {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// ServeHTTP answers GET ?id=a,b with {"records": [...]}.
func (j *Journal) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		web.WriteProblem(w, r, web.Errorf(http.StatusMethodNotAllowed, "method %s not allowed here (allowed: GET)", r.Method))
		return
	}
	ids := web.QueryList(r, "id")
	if len(ids) == 0 {
		web.WriteProblem(w, r, web.Errorf(http.StatusBadRequest, "id is required: an event_id, order_id or claim_token"))
		return
	}
	recs := j.Find(ids...)
	if recs == nil {
		recs = []JournalRecord{}
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"records": recs})
}

// Handler returns a slog.Handler that passes every record on to next, as
// next would, and keeps those that carry one of journalKeys.
func (j *Journal) Handler(next slog.Handler) slog.Handler {
	return journalHandler{next: next, j: j}
}

type journalHandler struct {
	next   slog.Handler
	j      *Journal
	attrs  []slog.Attr
	prefix string // the open groups, "a.b."
}

// Enabled is true at every level: the journal keeps debug records ("event
// processed") that the log itself may leave out.
func (h journalHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h journalHandler) Handle(ctx context.Context, r slog.Record) error {
	var err error
	if h.next.Enabled(ctx, r.Level) {
		err = h.next.Handle(ctx, r)
	}
	attrs := make(map[string]string, len(h.attrs)+r.NumAttrs())
	for _, a := range h.attrs {
		attrs[a.Key] = a.Value.Resolve().String()
	}
	r.Attrs(func(a slog.Attr) bool {
		attrs[h.prefix+a.Key] = a.Value.Resolve().String()
		return true
	})
	for _, key := range journalKeys {
		if attrs[key] != "" {
			h.j.add(JournalRecord{At: r.Time, Level: r.Level.String(), Msg: r.Message, Attrs: attrs})
			break
		}
	}
	return err
}

func (h journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	out := h
	out.next = h.next.WithAttrs(as)
	out.attrs = slices.Clone(h.attrs)
	for _, a := range as {
		out.attrs = append(out.attrs, slog.Attr{Key: h.prefix + a.Key, Value: a.Value})
	}
	return out
}

func (h journalHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	out := h
	out.next = h.next.WithGroup(name)
	out.prefix = h.prefix + name + "."
	return out
}
