// Package admin is the operator's view of the messaging tables every service
// has: the outbox (summary, rows, retry of failed events), the inbox, the
// dead letters (list, search, redrive, correct) and the parked delta events.
// Services mount it under /admin behind a bearer token. It writes no SQL of
// its own: each table's owner (pkg/outbox, pkg/inbox, pkg/deadletter,
// pkg/ordering) answers.
package admin

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/web"
	"github.com/relmsg/ordersaga/pkg/deadletter"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/ordering"
	"github.com/relmsg/ordersaga/pkg/outbox"
)

// Handler serves the messaging tables of one service's database.
type Handler struct {
	DB  *sqlx.DB
	Log *slog.Logger
	// Service and Instance (INSTANCE_ID) name who answers: the summary
	// says which instance it came from (the tables are the service's,
	// shared by every instance).
	Service, Instance string
	// Wake is called after failed events were put back to pending.
	Wake func()
	// Redriver republishes dead letters; nil: redrive answers 503.
	Redriver *deadletter.Redriver
}

// Routes mounts the endpoints on r (relative paths; mount under /admin).
func (h *Handler) Routes(r chi.Router) {
	handle := func(f web.HandlerFunc) http.HandlerFunc { return web.Handle(h.Log, f) }
	r.Get("/outbox/summary", handle(h.outboxSummary))
	r.Get("/outbox", handle(h.outboxRows))
	r.Post("/outbox/{event_id}/retry", handle(h.outboxRetry))
	r.Get("/inbox", handle(h.inboxRows))
	r.Get("/dead-letters", handle(h.deadLetters))
	r.Get("/parked", handle(h.parkedEvents))
	r.Post("/dead-letters/redrive", handle(h.redrive))
	r.Post("/dead-letters/{id}/correct", handle(h.correct))
}

// RequireToken guards next with "Authorization: Bearer <token>". An empty
// token refuses everything unless open is true (demo mode on a laptop).
// The answers are problem documents (web.RequireToken).
func RequireToken(token string, open bool) func(http.Handler) http.Handler {
	return web.RequireToken(token, open, "ADMIN_TOKEN")
}

func (h *Handler) outboxSummary(w http.ResponseWriter, r *http.Request) error {
	sum, err := outbox.Summarize(r.Context(), h.DB)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, struct {
		Service  string `json:"service,omitempty"`
		Instance string `json:"instance,omitempty"`
		outbox.Summary
	}{h.Service, h.Instance, sum})
	return nil
}

func (h *Handler) outboxRows(w http.ResponseWriter, r *http.Request) error {
	var f outbox.Filter
	if v := r.URL.Query().Get("aggregate_id"); v != "" {
		id, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return web.Errorf(http.StatusBadRequest, "aggregate_id must be a number")
		}
		f.AggregateID = id
	}
	if f.Status = r.URL.Query().Get("status"); f.Status != "" && !slices.Contains(outbox.Statuses, f.Status) {
		return web.Errorf(http.StatusBadRequest, "status must be pending, sending, sent or failed")
	}
	var err error
	if f.Limit, err = web.Limit(r, 100, 1000); err != nil {
		return err
	}
	rows, err := outbox.List(r.Context(), h.DB, f)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"events": rows})
	return nil
}

// outboxRetry gives a 'failed' event a new round of attempts, keeping its
// event_id: a replay of the same fact, which consumers that already have
// it deduplicate (outbox.Requeue), never a correction.
func (h *Handler) outboxRetry(w http.ResponseWriter, r *http.Request) error {
	id := chi.URLParam(r, "event_id")
	done, err := outbox.Requeue(r.Context(), h.DB, id, outbox.StatusFailed)
	if err != nil {
		return err
	}
	if !done {
		return web.Errorf(http.StatusConflict, "no failed event %s (only failed events can be retried)", id)
	}
	h.Log.Warn("operator retried a failed outbox event", "event_id", id)
	if h.Wake != nil {
		h.Wake()
	}
	web.WriteJSON(w, http.StatusOK, map[string]string{"event_id": id, "status": outbox.StatusPending})
	return nil
}

func (h *Handler) inboxRows(w http.ResponseWriter, r *http.Request) error {
	ids := web.QueryList(r, "event_id")
	if len(ids) == 0 || len(ids) > 200 {
		return web.Errorf(http.StatusBadRequest, "give 1 to 200 comma-separated event_id values")
	}
	rows, err := inbox.Rows(r.Context(), h.DB, ids)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"inbox": rows})
	return nil
}

// DeadLetterRow is a dead letter as operators see it: the headers as JSON,
// the payload as text.
type DeadLetterRow struct {
	deadletter.Letter
	Headers json.RawMessage `json:"headers"`
	Payload string          `json:"payload"`
}

// deadLetters lists dead letters, latest failure first; q searches the
// payload and the reason.
func (h *Handler) deadLetters(w http.ResponseWriter, r *http.Request) error {
	limit, err := web.Limit(r, 100, 1000)
	if err != nil {
		return err
	}
	query := r.URL.Query()
	dls, err := deadletter.List(r.Context(), h.DB, deadletter.Filter{
		Consumer: query.Get("consumer"), Status: query.Get("status"), EventType: query.Get("event_type"),
		EventID: query.Get("event_id"), Query: query.Get("q"), Limit: limit,
	})
	if err != nil {
		return err
	}
	rows := make([]DeadLetterRow, len(dls))
	for i, dl := range dls {
		rows[i] = DeadLetterRow{Letter: dl, Payload: string(dl.Payload)}
		if json.Valid(dl.Headers) {
			rows[i].Headers = dl.Headers
		}
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"dead_letters": rows})
	return nil
}

// redrive republishes dead letters to their consumer's queue, keeping the
// original event_id: {"ids":[1,2]} or a filter {"consumer":"inventory",
// "event_type":"order.created","q":"SKU-1","limit":100} over dead rows. The
// answer lists what happened to each one; 200 even when some could not be
// redriven (their outcome says why; those rows stay dead).
func (h *Handler) redrive(w http.ResponseWriter, r *http.Request) error {
	if h.Redriver == nil {
		return web.Errorf(http.StatusServiceUnavailable, "redrive is not configured on this service")
	}
	var sel deadletter.Selection
	if err := web.DecodeJSON(w, r, 64<<10, &sel); err != nil {
		return err
	}
	results, err := h.Redriver.Redrive(r.Context(), sel)
	if errors.Is(err, deadletter.ErrBadSelection) {
		return web.Errorf(http.StatusBadRequest, "%s", strings.TrimPrefix(err.Error(), deadletter.ErrBadSelection.Error()+": "))
	}
	if err != nil {
		return err
	}
	counts := map[string]int{}
	for _, res := range results {
		counts[res.Outcome]++
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{
		"requested": len(results),
		"redriven":  counts[deadletter.OutcomeRedriven],
		"outcomes":  counts,
		"results":   results,
	})
	return nil
}

// correct sends a correction in place of one dead letter: body
// {"payload": <the corrected JSON>, "reason": "..."}. The correction is a
// new event (a new event_id, the header corrects_event_id naming the dead
// one) on the consumer's queue; a redrive is the replay. 200 with the
// result (its outcome says whether it was published and marked); 404 no
// such dead letter; 409 not dead (redriven or corrected already); 422 a
// correction refused (no reason, the same payload, an event_id that is
// not a UUID).
func (h *Handler) correct(w http.ResponseWriter, r *http.Request) error {
	if h.Redriver == nil {
		return web.Errorf(http.StatusServiceUnavailable, "redrive is not configured on this service")
	}
	id, err := strconv.ParseUint(chi.URLParam(r, "id"), 10, 64)
	if err != nil || id == 0 {
		return web.Errorf(http.StatusBadRequest, "id must be a dead letter id")
	}
	var c deadletter.Correction
	if err := web.DecodeJSON(w, r, 1<<20, &c); err != nil {
		return err
	}
	res, err := h.Redriver.Correct(r.Context(), id, c)
	switch {
	case errors.Is(err, deadletter.ErrBadCorrection):
		return web.Errorf(http.StatusUnprocessableEntity, "%s", strings.TrimPrefix(err.Error(), deadletter.ErrBadCorrection.Error()+": "))
	case err != nil:
		return err
	case res.Outcome == deadletter.OutcomeNotFound:
		return web.Errorf(http.StatusNotFound, "dead letter not found")
	case res.Outcome == deadletter.OutcomeNotDead:
		return web.Errorf(http.StatusConflict, "dead letter is not dead: %s", res.Detail)
	}
	web.WriteJSON(w, http.StatusOK, res)
	return nil
}

// parkedEvents lists parked delta events: ?state=waiting (not applied yet,
// the default), overdue (past the deadline), or all.
func (h *Handler) parkedEvents(w http.ResponseWriter, r *http.Request) error {
	state := r.URL.Query().Get("state")
	switch state {
	case "":
		state = ordering.Waiting
	case ordering.Waiting, ordering.Overdue, ordering.All:
	default:
		return web.Errorf(http.StatusBadRequest, "state must be waiting, overdue or all")
	}
	limit, err := web.Limit(r, 100, 1000)
	if err != nil {
		return err
	}
	rows, err := ordering.ListParked(r.Context(), h.DB, state, limit)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"parked": rows})
	return nil
}
