package orderapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/retry"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/services/order/internal/order"
	"github.com/relmsg/ordersaga/services/order/internal/orderdb"
	"github.com/relmsg/ordersaga/services/order/internal/peerclient"
)

// The reconciler (chapter: 对账, verify that the business loop closed).
//
// A run (Reconcile), periodic (RECONCILE_INTERVAL) or asked for by an
// operator (POST /admin/reconciliation/run):
//
//  1. scan: orders open (pending_inventory, awaiting_payment) and unchanged
//     for longer than the grace window, cancelled orders whose refund has
//     been pending for longer than the refund grace window, and (up to
//     FinishedBatch) orders that finished (confirmed, rejected, cancelled)
//     within the recent window, longer than the grace ago, and that no
//     earlier run closed (reconciliation_checks). Both "now" and
//     updated_at are the order database's clock, so no other service's
//     clock enters the choice; the grace covers work still in flight and
//     the clock skew between services (跨服务时间可能不一致，对账要留合理宽限窗口).
//  2. per order, gather evidence: our outbox rows for it, and over HTTP
//     inventory's reservation, payment's payment (with its refund) and
//     inventory's outbox rows for it. Each answer is kept verbatim with the
//     time it arrived.
//  3. classify (order.Classify, a pure function): event_not_sent,
//     not_consumed, result_missing, really_failed, in_progress, unknown.
//  4. repair only through idempotent entry points, never by charging:
//     - republish_event / resend_event: our original event back to
//     pending, same row, same event_id: a replay (consumers drop what they
//     already processed by their inbox);
//     - correct_event: the participant's inbox has our event but its
//     record lacks the effect, so a replay would be dropped: a correction,
//     a new event_id whose corrects_event_id names the original
//     (replay.go);
//     - apply_result: the participant's result through the same decision
//     a consumer makes when the lost event arrives (decide), emitting the
//     same events;
//     - republish_participant_event: the participant's failed event
//     retried by its own admin endpoint, same event_id;
//     - report: nothing automatic is safe; an operator acts. A finished
//     order is then parked as needs_attention (reconciliation_checks) and
//     left out of later scans; so is one that MaxRepairs repairs did not
//     close.
//     A finished order that every participant agrees with is closed
//     (consistent) and not looked at again unless it changes.
//     A local repair re-reads the order under its row lock and compares it
//     with what the scan saw (status, refund status, updated_at): if it
//     moved meanwhile, nothing is done (outcome state_changed). The repair
//     and its audit row commit in one transaction; the row's number is
//     unique per order (orderdb.InsertAudit). Before each repair the run
//     checks that it still holds its lease.
//
// The reconciler never calls the PSP and never asks payment to charge: the
// only payment endpoint it uses is GET /payments/{order_id}.

// Outcomes of a repair (reconciliation_audit.outcome).
const (
	OutcomeRepaired     = "repaired"      // the repair was made
	OutcomeStateChanged = "state_changed" // the order or the event moved between scan and repair: nothing done
	OutcomeReported     = "reported"      // a finding for an operator
	OutcomeFailed       = "failed"        // the repair failed; the next run tries again
)

// FailpointReconcileBeforeRepair: the reconciler classified an order and
// has not started its repair.
const FailpointReconcileBeforeRepair = "order.reconcile.before-repair"

func init() {
	failpoint.Register(FailpointReconcileBeforeRepair, "the reconciler classified an order and has not repaired it yet: "+
		"if the lost event arrives now, the repair's compare-and-set must change nothing")
}

// RunSummary is what one reconciliation run found and did.
type RunSummary struct {
	RunID      string          `json:"run_id"`
	Trigger    string          `json:"trigger"`
	StartedAt  time.Time       `json:"started_at"`
	FinishedAt time.Time       `json:"finished_at"`
	Checked    int             `json:"checked"`
	Closed     int             `json:"closed"` // finished orders found consistent
	Found      map[string]int  `json:"classifications"`
	Repairs    []RepairSummary `json:"repairs"`
	Errors     []string        `json:"errors"`
}

// RepairSummary is one audit row written by a run.
type RepairSummary struct {
	RepairID       string `json:"repair_id"`
	OrderID        string `json:"order_id"`
	Classification string `json:"classification"`
	Action         string `json:"action"`
	Outcome        string `json:"outcome"`
	Detail         string `json:"detail"`
}

// Evidence is what the reconciler saw, stored in the audit row.
type Evidence struct {
	CheckedAt time.Time `json:"checked_at"`
	RunID     string    `json:"run_id"`
	Order     struct {
		Status       string     `json:"status"`
		RefundStatus string     `json:"refund_status"`
		Version      uint64     `json:"aggregate_version"`
		UpdatedAt    time.Time  `json:"updated_at"`
		DeadlineAt   *time.Time `json:"deadline_at"`
		AgeSeconds   float64    `json:"seconds_since_last_change"`
	} `json:"order"`
	OrderOutbox     []outbox.Row       `json:"order_outbox"`
	Reservation     *peerclient.Answer `json:"inventory_reservation"`
	Payment         *peerclient.Answer `json:"payment"`
	InventoryOutbox *peerclient.Answer `json:"inventory_outbox"`
	// ParticipantInbox: asked before a replay, whether the participant
	// processed our event (replay.go).
	ParticipantInbox *InboxCheck          `json:"participant_inbox,omitempty"`
	Classification   order.Classification `json:"classification"`
	Action           order.RepairAction   `json:"action"`
	Why              string               `json:"why"`
}

// ReconcilerLease is the reconciler's database lease (sqldb.TryLease):
// one run at a time across every instance of the order service. A second
// run at once would find the same orders and ask the same peers; the
// repairs themselves are compare-and-set and stay correct without it, and
// the audit row's key (orderdb.InsertAudit) keeps one row per finding. A
// run checks the lease before each repair and stops when it is lost.
const ReconcilerLease = "reconciler"

// ErrReconcilerBusy: another run (in this instance or another) holds the
// reconciler's lease.
var ErrReconcilerBusy = errors.New("a reconciliation run is in progress (in this instance or another)")

// adminLeaseWait is how long an operator's run waits for a run in
// progress to end before answering ErrReconcilerBusy; it holds no pool
// connection while it waits (sqldb.TryLease).
const adminLeaseWait = 20 * time.Second

// Reconcile runs one reconciliation pass; trigger says who asked
// ("schedule" or "admin"). Runs take turns across every instance through
// the database lease: a scheduled run skips when another holds it (that
// run does the work), an operator's run waits for it a little.
func (a *App) Reconcile(ctx context.Context, trigger string) (RunSummary, error) {
	wait := time.Duration(0)
	if trigger != "schedule" {
		wait = adminLeaseWait
	}
	lease, err := sqldb.TryLease(ctx, a.db, ReconcilerLease, wait)
	if errors.Is(err, sqldb.ErrLeaseHeld) {
		return RunSummary{Trigger: trigger}, ErrReconcilerBusy
	}
	if err != nil {
		return RunSummary{Trigger: trigger}, fmt.Errorf("reconcile: %w", err)
	}
	defer lease.Release()
	sum := RunSummary{RunID: uuid.NewString(), Trigger: trigger, StartedAt: time.Now().UTC(),
		Found: map[string]int{}, Repairs: []RepairSummary{}, Errors: []string{}}
	a.metrics.runs.WithLabelValues(trigger).Inc()
	log := a.log.With("job", "reconciler", "run_id", sum.RunID)

	cands, err := orderdb.ReconcileCandidates(ctx, a.db, a.cfg.Reconcile.Grace, a.cfg.Reconcile.RefundGrace, a.cfg.Reconcile.Batch)
	if err != nil {
		return sum, err
	}
	finished, err := orderdb.FinishedCandidates(ctx, a.db, a.cfg.Reconcile.Grace, a.cfg.Reconcile.Window, a.cfg.Reconcile.FinishedBatch)
	if err != nil {
		return sum, err
	}
	cands = append(cands, finished...)
	for _, c := range cands {
		if ctx.Err() != nil {
			sum.Errors = append(sum.Errors, ctx.Err().Error())
			break
		}
		sum.Checked++
		v, rep, err := a.reconcileOrder(ctx, log.With("order_id", c.ID), lease, sum.RunID, c)
		if errors.Is(err, sqldb.ErrLeaseLost) {
			a.leaseLost(ctx, log, ReconcilerLease, err)
			sum.Errors = append(sum.Errors, err.Error())
			sum.FinishedAt = time.Now().UTC()
			return sum, fmt.Errorf("reconcile: run %s stopped: %w", sum.RunID, err)
		}
		sum.Found[string(v.Classification)]++
		if v.Classification == order.Consistent && err == nil {
			sum.Closed++
		}
		if rep != nil {
			sum.Repairs = append(sum.Repairs, *rep)
		}
		if err != nil {
			sum.Errors = append(sum.Errors, fmt.Sprintf("order %d: %v", c.ID, err))
		}
	}
	sum.FinishedAt = time.Now().UTC()
	if len(sum.Repairs) > 0 || len(sum.Errors) > 0 {
		log.InfoContext(ctx, "reconciliation run", "checked", sum.Checked, "classifications", sum.Found,
			"repairs", len(sum.Repairs), "errors", len(sum.Errors))
	}
	return sum, nil
}

// RunReconciler runs a pass every interval until ctx ends. A failed pass
// is logged; the next one tries again. Singleton across instances: each
// instance ticks, the one that takes the lease runs (see Reconcile).
func (a *App) RunReconciler(ctx context.Context, interval time.Duration) error {
	retry.Every(ctx, interval, func() {
		switch _, err := a.Reconcile(ctx, "schedule"); {
		case errors.Is(err, ErrReconcilerBusy):
			a.log.DebugContext(ctx, "reconciliation run skipped: another instance holds the lease", "job", "reconciler")
		case errors.Is(err, sqldb.ErrLeaseLost):
			// Logged and counted by Reconcile; the next tick tries again.
		case err != nil && ctx.Err() == nil:
			a.log.WarnContext(ctx, "reconciliation run failed", "job", "reconciler", "err", err)
		}
	})
	return nil
}

// Audits lists recent audit rows (the reconciliation report), newest first;
// orderID 0 means every order.
func (a *App) Audits(ctx context.Context, orderID uint64, limit int) ([]orderdb.Audit, error) {
	return orderdb.Audits(ctx, a.db, orderID, limit)
}

// reconcileOrder gathers the evidence for one order, classifies it and
// repairs or reports a difference. It returns the audit row it wrote, if
// any.
func (a *App) reconcileOrder(ctx context.Context, log *slog.Logger, lease *sqldb.Lease, runID string, c orderdb.Candidate) (order.Verdict, *RepairSummary, error) {
	ev, obs, err := a.observe(ctx, runID, c)
	if err != nil {
		return order.Verdict{Classification: order.Unknown}, nil, err
	}
	if c.Finished() {
		if obs.EarlierRepairs, err = orderdb.RepairsSince(ctx, a.db, c.ID, c.UpdatedAt); err != nil {
			return order.Verdict{Classification: order.Unknown}, nil, err
		}
	}
	v := a.classifyWithInbox(ctx, obs, order.Classify(obs), &ev)
	ev.Classification, ev.Action, ev.Why = v.Classification, v.Action, v.Why
	if v.Classification == order.Consistent {
		return v, nil, orderdb.RecordCheck(ctx, a.db, c.ID, c.UpdatedAt, orderdb.CheckConsistent, "")
	}
	if !v.Classification.Difference() {
		if v.Classification == order.Unknown {
			log.WarnContext(ctx, "reconciler: a participant could not be asked; order left for the next run",
				"inventory_error", answerError(ev.Reservation), "payment_error", answerError(ev.Payment))
		}
		return v, nil, nil
	}
	a.metrics.differences.WithLabelValues(string(v.Classification)).Inc()
	if err := failpoint.Inject(ctx, FailpointReconcileBeforeRepair); err != nil {
		return v, nil, err
	}
	// A run whose session ended may have a successor by now: it repairs.
	if err := lease.Check(ctx); err != nil {
		return v, nil, err
	}

	audit := orderdb.Audit{RepairID: uuid.NewString(), RunID: runID, OrderID: c.ID, Seq: c.AuditSeq + 1,
		Classification: string(v.Classification), Action: string(v.Action)}
	evidence, err := json.Marshal(ev)
	if err != nil {
		return v, nil, err
	}
	audit.Evidence = evidence
	log = log.With("repair_id", audit.RepairID, "classification", v.Classification, "action", v.Action)
	rep, err := a.repair(ctx, log, c, v, audit)
	return v, rep, err
}

// repair makes the verdict's repair, or its report, and writes its audit
// row. It returns the row written (nil: none, another run's is the record).
func (a *App) repair(ctx context.Context, log *slog.Logger, c orderdb.Candidate, v order.Verdict, audit orderdb.Audit) (*RepairSummary, error) {
	var repairErr, parkErr error
	switch v.Action {
	case order.ApplyResult:
		repairErr = a.applyResult(ctx, log, c, v, &audit)
	case order.RepublishEvent:
		repairErr = a.requeue(ctx, c, v, &audit, order.OutboxPending, order.OutboxFailed)
	case order.ResendEvent:
		repairErr = a.requeue(ctx, c, v, &audit, order.OutboxSent)
	case order.CorrectEvent:
		repairErr = a.correct(ctx, c, v, &audit)
	case order.RepublishParticipantEvent:
		repairErr = a.retryParticipantEvent(ctx, c, v, &audit)
	case order.Report:
		earlier, err := orderdb.Reported(ctx, a.db, c.ID, audit.Classification)
		if err != nil {
			return nil, err
		}
		if earlier != "" { // reported on an earlier run: once is enough
			return nil, a.park(ctx, c, earlier)
		}
		audit.Outcome, audit.Detail = OutcomeReported, v.Why
		if repairErr = orderdb.InsertAudit(ctx, a.db, audit); repairErr == nil {
			// The report stands; an order left unparked is parked by the
			// next run, which finds the report (Reported).
			parkErr = a.park(ctx, c, audit.RepairID)
		}
	default:
		return nil, fmt.Errorf("no repair for action %q", v.Action)
	}
	if repairErr != nil && !errors.Is(repairErr, orderdb.ErrAuditExists) {
		// The repair's transaction rolled back, audit row included: record
		// the failure on its own.
		audit.Outcome, audit.Detail = OutcomeFailed, "repair failed: "+repairErr.Error()
		if err := orderdb.InsertAudit(ctx, a.db, audit); err != nil {
			repairErr = errors.Join(repairErr, err)
		}
	}
	if errors.Is(repairErr, orderdb.ErrAuditExists) {
		// Not an error: the row there (another run's, or this repair's
		// whose COMMIT went unanswered) is the record.
		log.WarnContext(ctx, "reconciler: this finding is audited already; nothing recorded twice",
			"audit_seq", audit.Seq, "err", repairErr)
		return nil, nil
	}
	a.metrics.repairs.WithLabelValues(audit.Action, audit.Outcome).Inc()
	lvl := slog.LevelWarn
	if audit.Outcome == OutcomeFailed {
		lvl = slog.LevelError
	}
	log.Log(ctx, lvl, "reconciler: difference found", "outcome", audit.Outcome, "detail", audit.Detail, "why", v.Why)
	if audit.Outcome == OutcomeRepaired && v.Action != order.RepublishParticipantEvent {
		a.wake()
	}
	return &RepairSummary{RepairID: audit.RepairID, OrderID: fmt.Sprint(c.ID), Classification: audit.Classification,
		Action: audit.Action, Outcome: audit.Outcome, Detail: audit.Detail}, errors.Join(repairErr, parkErr)
}

// park leaves a finished order the reconciler reported out of later scans,
// as needs_attention with the audit row that says why; open orders are
// never parked (their deadline or their participants still move them).
func (a *App) park(ctx context.Context, c orderdb.Candidate, repairID string) error {
	if !c.Finished() {
		return nil
	}
	return orderdb.RecordCheck(ctx, a.db, c.ID, c.UpdatedAt, orderdb.CheckNeedsAttention, repairID)
}

// observe gathers what every service recorded about the order.
func (a *App) observe(ctx context.Context, runID string, c orderdb.Candidate) (Evidence, order.Observation, error) {
	var ev Evidence
	ev.CheckedAt, ev.RunID = time.Now().UTC(), runID
	ev.Order.Status, ev.Order.RefundStatus, ev.Order.Version = c.Status, c.RefundStatus, c.Version
	ev.Order.UpdatedAt, ev.Order.DeadlineAt, ev.Order.AgeSeconds = c.UpdatedAt, c.DeadlineAt, float64(c.AgeMicros)/1e6
	obs := order.Observation{Status: order.Status(c.Status), RefundStatus: order.RefundStatus(c.RefundStatus)}

	own, err := outbox.OfAggregate(ctx, a.db, c.ID)
	if err != nil {
		return ev, obs, err
	}
	ev.OrderOutbox = own
	for _, e := range own {
		obs.OwnEvents = append(obs.OwnEvents, order.EventState{EventID: e.EventID, Type: e.EventType, Status: e.Status})
	}
	peers := a.cfg.Peers
	if peers == nil {
		return ev, obs, nil // nobody to ask: Classify answers unknown
	}
	res, resAns, err := peers.Reservation(ctx, c.ID)
	ev.Reservation, obs.InventoryAnswered = &resAns, err == nil
	if res != nil {
		obs.Reservation, obs.ReservationReason = res.Status, res.Reason
	}
	pay, payAns, err := peers.Payment(ctx, c.ID)
	ev.Payment, obs.PaymentAnswered = &payAns, err == nil
	if pay != nil {
		obs.Payment, obs.PaymentFailure = pay.Status, pay.FailureReason
		if pay.Refund != nil {
			obs.Refund = pay.Refund.Status
		}
	}
	if c.Finished() && obs.Reservation != order.ResCommitFailed {
		// A finished order's verdict reads inventory's outbox only for its
		// commit-failed event: one call fewer per order checked.
		return ev, obs, nil
	}
	rows, outAns, err := peers.Outbox(ctx, peerclient.InventoryService, c.ID)
	ev.InventoryOutbox = &outAns
	if err == nil {
		obs.InventoryEvents = []order.EventState{}
		for _, r := range rows {
			obs.InventoryEvents = append(obs.InventoryEvents, order.EventState{EventID: r.EventID, Type: r.EventType, Status: r.Status})
		}
	}
	return ev, obs, nil
}

func answerError(a *peerclient.Answer) string {
	if a == nil {
		return "not asked (no peers configured)"
	}
	if a.Error != "" {
		return a.Error
	}
	return fmt.Sprintf("HTTP %d", a.HTTPStatus)
}

// repairUnchanged runs repair in one transaction (retried) with the order
// locked, if the order is still as the scan saw it (c). If it moved, the
// repair is not made: the audit row says so, in moved's words.
func (a *App) repairUnchanged(ctx context.Context, c orderdb.Candidate, audit *orderdb.Audit, moved func(order.Order) string,
	repair func(tx *sqlx.Tx, o order.Order) error) error {
	return sqldb.WithTxRetry(ctx, a.db, a.txRetry(false), func(tx *sqlx.Tx) error {
		o, err := orderdb.Lock(ctx, tx, c.ID)
		if err != nil {
			return err
		}
		if !c.Same(o) {
			audit.Outcome = OutcomeStateChanged
			audit.Detail = moved(o)
			return orderdb.InsertAudit(ctx, tx, *audit)
		}
		return repair(tx, o)
	})
}

// applyResult applies the participant's result to the order with the
// trigger its lost event would have fired, through decide: the same
// transition, the same emitted event, as if the event had arrived. The
// order is compared with the scan under its row lock first.
func (a *App) applyResult(ctx context.Context, log *slog.Logger, c orderdb.Candidate, v order.Verdict, audit *orderdb.Audit) error {
	moved := func(o order.Order) string {
		return fmt.Sprintf("the order moved during the scan (now %s, refund %s): %s not applied", o.Status, o.RefundStatus, v.Trigger)
	}
	return a.repairUnchanged(ctx, c, audit, moved, func(tx *sqlx.Tx, o order.Order) error {
		changed, err := a.decide(ctx, Direct(tx), log, o, v.Trigger, v.Reason, cause{actor: ActorReconciler, repairID: audit.RepairID})
		if err != nil {
			return err
		}
		if !changed {
			return fmt.Errorf("trigger %s does not apply to an order in %s", v.Trigger, o.Status)
		}
		after, err := orderdb.Lock(ctx, tx, c.ID)
		if err != nil {
			return err
		}
		audit.Outcome = OutcomeRepaired
		audit.Detail = fmt.Sprintf("applied %s as if its event had arrived: %s to %s, refund %s",
			v.Trigger, o.Status, after.Status, after.RefundStatus)
		return orderdb.InsertAudit(ctx, tx, *audit)
	})
}

// retryParticipantEvent asks the participant to retry its failed event by
// its event_id: a replay, the event never left. There is no local transaction to join: the order is
// re-read first, and the participant's endpoint itself only acts on a
// failed event (409 otherwise).
func (a *App) retryParticipantEvent(ctx context.Context, c orderdb.Candidate, v order.Verdict, audit *orderdb.Audit) error {
	o, err := orderdb.Get(ctx, a.db, c.ID)
	if err != nil {
		return err
	}
	if !c.Same(o) {
		audit.Outcome = OutcomeStateChanged
		audit.Detail = fmt.Sprintf("the order moved during the scan (now %s): %s's event %s left alone", o.Status, v.Service, v.EventID)
		return orderdb.InsertAudit(ctx, a.db, *audit)
	}
	_, err = a.cfg.Peers.RetryOutbox(ctx, v.Service, v.EventID)
	switch {
	case errors.Is(err, peerclient.ErrNotRetried):
		audit.Outcome = OutcomeStateChanged
		audit.Detail = fmt.Sprintf("%s's event %s is no longer failed: left alone", v.Service, v.EventID)
	case err != nil:
		return err
	default:
		audit.Outcome = OutcomeRepaired
		audit.Detail = fmt.Sprintf("%s retried its failed event %s (same event_id)", v.Service, v.EventID)
	}
	return orderdb.InsertAudit(ctx, a.db, *audit)
}
