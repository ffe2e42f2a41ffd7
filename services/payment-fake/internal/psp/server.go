package psp

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/web"
	"github.com/relmsg/ordersaga/pkg/base/wire"
)

const (
	maxBodyBytes = 64 << 10
	// workTimeout bounds the database work of one call. The work runs on a
	// context the caller cannot cancel: a PSP finishes what it has received.
	workTimeout = 15 * time.Second
)

// Server is one fake PSP instance: its HTTP API over its own tables, and its
// fault switch.
type Server struct {
	db       *sqlx.DB
	log      *slog.Logger
	switches switchboard
	handler  http.Handler
}

// NewServer returns a PSP keeping its books in db (psp_charges, psp_refunds,
// from migrations/payment). log may be nil.
func NewServer(db *sqlx.DB, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{db: db, log: log.With("component", "psp")}
	s.switches.set(Switch{Mode: ModeNormal})
	s.handler = s.routes()
	return s
}

// Handler returns the PSP's HTTP API. Its routes are relative ("/charges"):
// mount it with the prefix stripped, e.g.
//
//	r.Mount("/psp", http.StripPrefix("/psp", pspServer.Handler()))   // chi
//	mux.Handle("/psp/", http.StripPrefix("/psp", pspServer.Handler())) // net/http
func (s *Server) Handler() http.Handler { return s.handler }

// SetSwitch sets the fault switch for the following charge and refund calls.
// An invalid switch is refused and the current one kept.
func (s *Server) SetSwitch(sw Switch) error {
	if err := validSwitch(sw); err != nil {
		return err
	}
	s.switches.set(sw)
	s.log.Info("psp switch set", "mode", sw.Mode, "delay_ms", sw.DelayMS, "count", sw.Count)
	return nil
}

// CurrentSwitch returns the fault switch, with the number of calls it still
// affects in Count (0: unlimited).
func (s *Server) CurrentSwitch() Switch { return s.switches.current() }

func (s *Server) handleCreateCharge(w http.ResponseWriter, r *http.Request) error {
	var req ChargeRequest
	if err := decodeValid(w, r, &req, func() error { return validCharge(req) }); err != nil {
		return err
	}
	log := s.log.With("order_ref", req.OrderRef, "idempotency_key", req.IdempotencyKey)
	sw := s.switches.take()
	return s.serveCall(w, r, log, sw, func(ctx context.Context) (any, bool, error) {
		c, created, err := s.charge(ctx, req, sw.Mode == ModeDecline)
		if err == nil {
			log.Info("psp charge", "charge_id", c.ChargeID, "status", c.Status, "decline_code", c.DeclineCode, "replayed", !created)
		}
		return c, created, err
	})
}

func (s *Server) handleGetCharge(w http.ResponseWriter, r *http.Request) error {
	return writeByKey(w, r, s.db, chargeByKey)
}

func (s *Server) handleListCharges(w http.ResponseWriter, r *http.Request) error {
	return writeList(w, r, s.db, "order_ref", chargesForOrder, func(cs []Charge) any { return wire.ChargeList{Charges: cs} })
}

func (s *Server) handleCreateRefund(w http.ResponseWriter, r *http.Request) error {
	var req RefundRequest
	if err := decodeValid(w, r, &req, func() error { return validRefund(req) }); err != nil {
		return err
	}
	log := s.log.With("charge_id", req.ChargeID, "idempotency_key", req.IdempotencyKey)
	return s.serveCall(w, r, log, s.switches.takeRefund(), func(ctx context.Context) (any, bool, error) {
		f, created, err := s.refund(ctx, req)
		if err == nil {
			log.Info("psp refund", "refund_id", f.RefundID, "amount_cents", f.AmountCents, "replayed", !created)
		}
		return f, created, err
	})
}

func (s *Server) handleGetRefund(w http.ResponseWriter, r *http.Request) error {
	return writeByKey(w, r, s.db, refundByKey)
}

func (s *Server) handleListRefunds(w http.ResponseWriter, r *http.Request) error {
	return writeList(w, r, s.db, "charge_id", refundsForCharge, func(fs []Refund) any { return wire.PSPRefundList{Refunds: fs} })
}

// writeByKey answers a status query (GET /charges/{key}, /refunds/{key})
// with the record find reads by the path's idempotency key.
func writeByKey[T any](w http.ResponseWriter, r *http.Request, db *sqlx.DB,
	find func(context.Context, sqlx.QueryerContext, string) (T, error)) error {
	v, err := find(r.Context(), db, r.PathValue("key"))
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, v)
	return nil
}

// writeList answers a list (GET /charges?order_ref=, /refunds?charge_id=)
// with the records list reads by the query parameter param, in the
// document page makes of them.
func writeList[T any](w http.ResponseWriter, r *http.Request, db *sqlx.DB, param string,
	list func(context.Context, sqlx.QueryerContext, string) ([]T, error), page func([]T) any) error {
	v, err := queryKey(r, param)
	if err != nil {
		return err
	}
	vs, err := list(r.Context(), db, v)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, page(vs))
	return nil
}

func (s *Server) handleGetSwitch(w http.ResponseWriter, r *http.Request) error {
	web.WriteJSON(w, http.StatusOK, s.CurrentSwitch())
	return nil
}

func (s *Server) handlePutSwitch(w http.ResponseWriter, r *http.Request) error {
	var sw Switch
	if err := web.DecodeJSON(w, r, maxBodyBytes, &sw); err != nil {
		return err
	}
	if err := s.SetSwitch(sw); err != nil {
		return web.Errorf(http.StatusUnprocessableEntity, "%s", err.Error())
	}
	web.WriteJSON(w, http.StatusOK, s.CurrentSwitch())
	return nil
}

func (s *Server) handleNotFound(w http.ResponseWriter, r *http.Request) error {
	return web.Errorf(http.StatusNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path)
}

// decodeValid reads a charge or refund request: strict JSON, then its own
// checks (422 with the reason).
func decodeValid(w http.ResponseWriter, r *http.Request, req any, valid func() error) error {
	if err := web.DecodeJSON(w, r, maxBodyBytes, req); err != nil {
		return err
	}
	if err := valid(); err != nil {
		return web.Errorf(http.StatusUnprocessableEntity, "%s", err.Error())
	}
	return nil
}

// queryKey reads the query parameter that selects a list (order_ref,
// charge_id).
func queryKey(r *http.Request, name string) (string, error) {
	v := r.URL.Query().Get(name)
	if err := validKey(name, v, 64); err != nil {
		return "", web.Errorf(http.StatusBadRequest, "query parameter %s", err.Error())
	}
	return v, nil
}

// serveCall runs one charge or refund through the fault switch sw (taken
// by the caller: a refund does not use up a decline). The switch
// may stop it before any work (fail-before-charge, error-5xx); the work runs
// on a context the caller cannot cancel, since a PSP finishes what it has
// received; then its answer, the result (201, or 200 replayed) or the
// error, goes back through the switch (slow, lose-response) and the
// failpoint, which may drop it.
func (s *Server) serveCall(w http.ResponseWriter, r *http.Request, log *slog.Logger, sw Switch,
	work func(context.Context) (v any, created bool, err error)) error {
	if !s.beforeCall(w, log, sw) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), workTimeout)
	defer cancel()
	v, created, err := work(ctx)
	if !s.afterCall(w, r, log, sw) {
		return nil // no answer: the connection is dropped, or the caller left
	}
	if err != nil {
		return err
	}
	writeResult(w, created, v)
	return nil
}

// beforeCall applies the switch before anything is charged. It reports
// whether the call goes on.
func (s *Server) beforeCall(w http.ResponseWriter, log *slog.Logger, sw Switch) bool {
	switch sw.Mode {
	case ModeFailBeforeCharge:
		log.Warn("psp switch: dropping the connection before charging", "mode", sw.Mode)
		dropConnection(w)
		return false
	case ModeError5xx:
		log.Warn("psp switch: answering 502 without charging", "mode", sw.Mode)
		web.WriteProblem(w, nil, web.Errorf(http.StatusBadGateway, "payment network unavailable (psp switch error-5xx); nothing was charged or refunded"))
		return false
	}
	return true
}

// afterCall applies the switch to a call that has done its work: slow
// waits first, lose-response drops the connection instead. It reports
// whether the answer is to be written.
func (s *Server) afterCall(w http.ResponseWriter, r *http.Request, log *slog.Logger, sw Switch) bool {
	// The same window as lose-response, as a named failpoint: "error"
	// drops the answer, "crash" kills the PSP's process after the charge.
	if err := failpoint.Inject(r.Context(), "psp.charge.after-charge-before-response"); err != nil {
		log.Warn("failpoint: work committed, dropping the connection without an answer", "err", err)
		dropConnection(w)
		return false
	}
	switch sw.Mode {
	case ModeLoseResponse:
		log.Warn("psp switch: work committed, dropping the connection without an answer", "mode", sw.Mode)
		dropConnection(w)
		return false
	case ModeSlow:
		log.Warn("psp switch: work committed, answering late", "mode", sw.Mode, "delay_ms", sw.DelayMS)
		t := time.NewTimer(time.Duration(sw.DelayMS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			log.Warn("psp switch: caller gave up before the late answer", "err", r.Context().Err())
			return false
		}
	}
	return true
}

// dropConnection closes the client's connection without writing a byte of
// answer, as a network failure or a crashed PSP would.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2): abort the stream instead.
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}

// writeResult answers 201 for what this call created and 200 (with the
// Idempotent-Replayed header) for the stored result of an earlier call.
func writeResult(w http.ResponseWriter, created bool, v any) {
	if created {
		web.WriteJSON(w, http.StatusCreated, v)
		return
	}
	w.Header().Set("Idempotent-Replayed", "true")
	web.WriteJSON(w, http.StatusOK, v)
}

// httpError maps the errors of the PSP's books to their HTTP answers (the
// web.Edge of every route calls it); any other error is returned as it is
// and answered with a generic 500.
func httpError(err error) error {
	switch {
	case errors.Is(err, errKeyReused):
		return web.Problemf(http.StatusConflict, web.TypeKeyReused, "%s", errKeyReused.Error())
	case errors.Is(err, errNoCharge), errors.Is(err, errNoRefund):
		return web.Errorf(http.StatusNotFound, "%s", err.Error())
	case errors.Is(err, errUnknownCharge), errors.Is(err, errChargeDeclined), errors.Is(err, errRefundTooLarge):
		return web.Errorf(http.StatusUnprocessableEntity, "%s", err.Error())
	}
	return err
}
