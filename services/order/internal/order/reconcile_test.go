package order

import (
	"testing"
	"time"
)

// Every state that waits has a deadline; every other state has none, so
// the move out of a waiting state clears it.
func TestDeadlines(t *testing.T) {
	t.Parallel()
	d := Deadlines{Participant: time.Minute, Payment: 3 * time.Minute}
	want := map[Status]time.Duration{PendingInventory: time.Minute, AwaitingPayment: 3 * time.Minute}
	for _, s := range Statuses {
		if got := d.For(s); got != want[s] {
			t.Errorf("For(%s) = %v, want %v", s, got, want[s])
		}
		if s.Terminal() && d.For(s) != 0 {
			t.Errorf("terminal status %s has a deadline", s)
		}
		// A state with a deadline must be cancellable: the sweep cancels
		// through CancelRequested.
		if d.For(s) > 0 {
			if to, ok := Next(s, CancelRequested); !ok || to != Cancelled {
				t.Errorf("status %s has a deadline but CancelRequested leads to (%s, %v)", s, to, ok)
			}
		}
	}
	if DefaultDeadlines.GiveUp() >= 15*time.Minute {
		t.Errorf("default payment deadline, margin and wait (%v) must stay below the default reservation lease (15m)", DefaultDeadlines.GiveUp())
	}
	// The order asks payment only after payment's own deadline.
	d.PaymentMargin = time.Minute
	if got := d.For(AwaitingPayment); got != 4*time.Minute {
		t.Errorf("For(awaiting_payment) with a margin = %v, want the payment's deadline plus the margin (4m)", got)
	}
	if DeadlineReason(PendingInventory) != "inventory did not answer in time" || DeadlineReason(AwaitingPayment) != "payment deadline passed" {
		t.Errorf("deadline reasons: %q, %q", DeadlineReason(PendingInventory), DeadlineReason(AwaitingPayment))
	}
}

// classifyCase is one row of TestClassify: an observation and the verdict
// Classify must reach on it.
type classifyCase struct {
	name    string
	obs     Observation
	class   Classification
	action  RepairAction
	trigger Trigger
	eventID string
}

// The builders of classifyCases' observations: an order's own events, an
// open order whose participants answered, a finished one with what each
// participant recorded, and with, which changes one of them.
func created(status string) []EventState {
	return []EventState{{EventID: "e-created", Type: "order.created", Status: status}}
}

var cancelled = []EventState{{EventID: "e-created", Type: "order.created", Status: OutboxSent},
	{EventID: "e-cancel", Type: "order.cancelled", Status: OutboxSent}}

// paying is an open order in state s whose stock inventory holds, with
// what payment recorded of its charge.
func paying(s Status, payment string) Observation {
	o := open(s)
	o.Reservation, o.Payment = ResReserved, payment
	return o
}

// reserved is an open order in state s whose stock inventory holds, its
// inventory.reserved in status event of inventory's outbox.
func reserved(s Status, event string) Observation {
	o := open(s)
	o.Reservation = ResReserved
	o.InventoryEvents = []EventState{{EventID: "e-reserved", Type: "inventory.reserved", Status: event}}
	return o
}

func open(s Status) Observation {
	return Observation{Status: s, RefundStatus: RefundNone, OwnEvents: created(OutboxSent),
		InventoryAnswered: true, PaymentAnswered: true}
}

// refunding is a cancelled order waiting for its refund, with what payment
// recorded of the charge and of the refund.
func refunding(payment, refund string) Observation {
	return Observation{Status: Cancelled, RefundStatus: RefundPending, OwnEvents: cancelled,
		InventoryAnswered: true, PaymentAnswered: true, Payment: payment, Refund: refund}
}

func with(o Observation, f func(*Observation)) Observation { f(&o); return o }

var finished = []EventState{{EventID: "e-created", Type: "order.created", Status: OutboxSent},
	{EventID: "e-confirm", Type: "order.confirmed", Status: OutboxSent},
	{EventID: "e-cancel", Type: "order.cancelled", Status: OutboxSent}}

func done(s Status, refund RefundStatus, reservation, payment string) Observation {
	o := Observation{Status: s, RefundStatus: refund, OwnEvents: finished, InventoryAnswered: true, PaymentAnswered: true,
		Reservation: reservation, Payment: payment}
	if payment == PayRefunded {
		o.Refund = RefundReqSucceeded
	}
	return o
}

// classifyCases is a data table, long by its rows (one a case), not by
// any logic: every status Classify meets, each with the verdict it must reach.
var classifyCases = []classifyCase{
	{"inventory not answering", with(open(PendingInventory), func(o *Observation) { o.InventoryAnswered = false }),
		Unknown, NoAction, "", ""},
	{"payment not answering", with(open(AwaitingPayment), func(o *Observation) { o.PaymentAnswered = false }),
		Unknown, NoAction, "", ""},

	// pending_inventory
	{"our OrderCreated failed in the outbox", with(open(PendingInventory), func(o *Observation) { o.OwnEvents = created(OutboxFailed) }),
		EventNotSent, RepublishEvent, "", "e-created"},
	{"our OrderCreated still pending", with(open(PendingInventory), func(o *Observation) { o.OwnEvents = created(OutboxPending) }),
		EventNotSent, RepublishEvent, "", "e-created"},
	{"our OrderCreated being sent", with(open(PendingInventory), func(o *Observation) { o.OwnEvents = created(OutboxSending) }),
		InProgress, NoAction, "", ""},
	{"OrderCreated sent, no reservation", open(PendingInventory), NotConsumed, ResendEvent, "", "e-created"},
	{"OrderCreated sent and in inventory's inbox, no reservation", with(open(PendingInventory), func(o *Observation) {
		o.Processed = map[string]bool{"e-created": true}
	}), NotApplied, CorrectEvent, "", "e-created"},
	{"OrderCreated sent, inventory's inbox asked: not there", with(open(PendingInventory), func(o *Observation) {
		o.Processed = map[string]bool{"e-created": false}
	}), NotConsumed, ResendEvent, "", "e-created"},
	{"no OrderCreated at all", with(open(PendingInventory), func(o *Observation) { o.OwnEvents = nil }),
		ReallyFailed, Report, "", ""},
	{"inventory rejected, order missed it", with(open(PendingInventory), func(o *Observation) {
		o.Reservation, o.ReservationReason = ResRejected, "insufficient stock"
	}), ResultMissing, ApplyResult, InventoryRejected, ""},
	{"reserved, payment charging, order missed it", paying(PendingInventory, PayPending), ResultMissing, ApplyResult, InventoryReserved, ""},
	{"reserved, event sent, nobody consumed it", reserved(PendingInventory, OutboxSent), ResultMissing, ApplyResult, InventoryReserved, ""},
	{"reserved, inventory's event failed", reserved(PendingInventory, OutboxFailed), EventNotSent, RepublishParticipantEvent, "", "e-reserved"},
	{"reserved, inventory's event pending", reserved(PendingInventory, OutboxPending), InProgress, NoAction, "", ""},
	{"payment succeeded while order pending_inventory", paying(PendingInventory, PaySucceeded), ResultMissing, ApplyResult, PaymentSucceeded, ""},
	{"inventory released an open order", with(open(PendingInventory), func(o *Observation) { o.Reservation = ResReleased }),
		ReallyFailed, Report, "", ""},

	// awaiting_payment
	{"payment succeeded, result lost", paying(AwaitingPayment, PaySucceeded), ResultMissing, ApplyResult, PaymentSucceeded, ""},
	{"payment failed, result lost", with(paying(AwaitingPayment, PayFailed), func(o *Observation) { o.PaymentFailure = "card_declined" }),
		ResultMissing, ApplyResult, PaymentFailed, ""},
	{"payment pending", paying(AwaitingPayment, PayPending), InProgress, NoAction, "", ""},
	{"payment parked", paying(AwaitingPayment, PayNeedsAttention), ReallyFailed, Report, "", ""},
	{"payment never saw the reservation", reserved(AwaitingPayment, OutboxSent), NotConsumed, Report, "", ""},
	{"payment never saw it, inventory's event failed", reserved(AwaitingPayment, OutboxFailed), EventNotSent, RepublishParticipantEvent, "", "e-reserved"},
	{"reservation expired, payment pending", with(open(AwaitingPayment), func(o *Observation) { o.Reservation, o.Payment = ResExpired, PayPending }),
		InProgress, NoAction, "", ""},

	// cancelled, refund pending
	{"refund done, result lost", refunding(PayRefunded, RefundReqSucceeded),
		ResultMissing, ApplyResult, PaymentRefunded, ""},
	{"refund requested", refunding(PaySucceeded, RefundReqRequested), InProgress, NoAction, "", ""},
	{"refund parked", refunding(PaySucceeded, RefundReqNeedsAttention), ReallyFailed, Report, "", ""},
	{"payment never saw the cancel", refunding(PaySucceeded, ""), NotConsumed, ResendEvent, "", "e-cancel"},
	{"payment processed the cancel, no refund requested", with(refunding(PaySucceeded, ""), func(o *Observation) {
		o.Processed = map[string]bool{"e-cancel": true}
	}), NotApplied, CorrectEvent, "", "e-cancel"},
	{"our OrderCancelled failed", Observation{Status: Cancelled, RefundStatus: RefundPending,
		OwnEvents:         []EventState{{EventID: "e-cancel", Type: "order.cancelled", Status: OutboxFailed}},
		InventoryAnswered: true, PaymentAnswered: true, Payment: PaySucceeded},
		EventNotSent, RepublishEvent, "", "e-cancel"},

	// finished orders: what each participant recorded against what the
	// outcome implies
	{"confirmed, closed", done(Confirmed, RefundNone, ResCommitted, PaySucceeded), Consistent, NoAction, "", ""},
	{"confirmed, order.confirmed never reached inventory", done(Confirmed, RefundNone, ResReserved, PaySucceeded),
		NotConsumed, ResendEvent, "", "e-confirm"},
	{"confirmed, the lease ran out waiting for order.confirmed", done(Confirmed, RefundNone, ResExpired, PaySucceeded),
		NotConsumed, ResendEvent, "", "e-confirm"},
	{"confirmed, inventory processed order.confirmed, still reserved", with(done(Confirmed, RefundNone, ResReserved, PaySucceeded), func(o *Observation) {
		o.Processed = map[string]bool{"e-confirm": true}
	}), NotApplied, CorrectEvent, "", "e-confirm"},
	{"confirmed, a correction is the latest order.confirmed, not processed", with(done(Confirmed, RefundNone, ResReserved, PaySucceeded), func(o *Observation) {
		o.OwnEvents = append(append([]EventState{}, finished...), EventState{EventID: "e-confirm-2", Type: "order.confirmed", Status: OutboxSent})
		o.Processed = map[string]bool{"e-confirm": true}
	}), NotConsumed, ResendEvent, "", "e-confirm-2"},
	{"confirmed, corrections did not close it", with(done(Confirmed, RefundNone, ResReserved, PaySucceeded), func(o *Observation) {
		o.Processed, o.EarlierRepairs = map[string]bool{"e-confirm": true}, MaxRepairs
	}), ReallyFailed, Report, "", ""},
	{"confirmed, our order.confirmed failed", with(done(Confirmed, RefundNone, ResReserved, PaySucceeded), func(o *Observation) {
		o.OwnEvents = []EventState{{EventID: "e-confirm", Type: "order.confirmed", Status: OutboxFailed}}
	}), EventNotSent, RepublishEvent, "", "e-confirm"},
	{"confirmed, our order.confirmed being sent", with(done(Confirmed, RefundNone, ResReserved, PaySucceeded), func(o *Observation) {
		o.OwnEvents = []EventState{{EventID: "e-confirm", Type: "order.confirmed", Status: OutboxSending}}
	}), InProgress, NoAction, "", ""},
	{"confirmed, commit failed and the order missed it", done(Confirmed, RefundNone, ResCommitFailed, PaySucceeded),
		ResultMissing, ApplyResult, InventoryCommitFailed, ""},
	{"confirmed, inventory's commit-failed failed in its outbox", with(done(Confirmed, RefundNone, ResCommitFailed, PaySucceeded), func(o *Observation) {
		o.InventoryEvents = []EventState{{EventID: "e-cf", Type: "inventory.commit-failed", Status: OutboxFailed}}
	}), EventNotSent, RepublishParticipantEvent, "", "e-cf"},
	{"confirmed, released stock", done(Confirmed, RefundNone, ResReleased, PaySucceeded), ReallyFailed, Report, "", ""},
	{"confirmed, payment refunded", done(Confirmed, RefundNone, ResCommitted, PayRefunded), ReallyFailed, Report, "", ""},
	{"confirmed, no payment", done(Confirmed, RefundNone, ResCommitted, PayNone), ReallyFailed, Report, "", ""},
	{"confirmed, repairs did not close it", with(done(Confirmed, RefundNone, ResReserved, PaySucceeded), func(o *Observation) {
		o.EarlierRepairs = MaxRepairs
	}), ReallyFailed, Report, "", ""},
	{"cancelled, released, nothing charged", done(Cancelled, RefundNone, ResReleased, PayNone), Consistent, NoAction, "", ""},
	{"cancelled, released, payment withdrawn", done(Cancelled, RefundNone, ResReleased, PayWithdrawn), Consistent, NoAction, "", ""},
	{"cancelled, released, declined", done(Cancelled, RefundNone, ResReleased, PayFailed), Consistent, NoAction, "", ""},
	{"cancelled before anything", done(Cancelled, RefundNone, ResCancelledBeforeReserve, PayCancelledBeforeCharge), Consistent, NoAction, "", ""},
	{"cancelled, inventory had rejected", done(Cancelled, RefundNone, ResRejected, PayNone), Consistent, NoAction, "", ""},
	{"cancelled after confirm, restocked and refunded", done(Cancelled, RefundRefunded, ResRestocked, PayRefunded), Consistent, NoAction, "", ""},
	{"cancelled, stock still held", done(Cancelled, RefundNone, ResReserved, PayWithdrawn), NotConsumed, ResendEvent, "", "e-cancel"},
	{"cancelled, inventory processed the cancel, stock still held", with(done(Cancelled, RefundNone, ResReserved, PayWithdrawn), func(o *Observation) {
		o.Processed = map[string]bool{"e-cancel": true}
	}), NotApplied, CorrectEvent, "", "e-cancel"},
	{"cancelled, inventory has no record", done(Cancelled, RefundNone, "", PayNone), NotConsumed, ResendEvent, "", "e-cancel"},
	{"cancelled, payment settling", done(Cancelled, RefundNone, ResReleased, PayPending), InProgress, NoAction, "", ""},
	{"cancelled, a charge the order never heard of", done(Cancelled, RefundNone, ResReleased, PaySucceeded),
		ResultMissing, ApplyResult, PaymentSucceeded, ""},
	{"cancelled, refunded but the order missed it", done(Cancelled, RefundNone, ResRestocked, PayRefunded),
		ResultMissing, ApplyResult, PaymentRefunded, ""},
	{"cancelled, refunded says the order only", done(Cancelled, RefundRefunded, ResRestocked, PaySucceeded), ReallyFailed, Report, "", ""},
	{"cancelled, charge parked", done(Cancelled, RefundNone, ResReleased, PayNeedsAttention), ReallyFailed, Report, "", ""},
	{"rejected, nothing reserved or charged", done(Rejected, RefundNone, ResRejected, PayNone), Consistent, NoAction, "", ""},
	{"rejected, a cancel marker at payment", done(Rejected, RefundNone, ResRejected, PayCancelledBeforeCharge), Consistent, NoAction, "", ""},
	{"rejected, stock held", done(Rejected, RefundNone, ResReserved, PayNone), ReallyFailed, Report, "", ""},
	{"rejected, charged", done(Rejected, RefundNone, ResRejected, PaySucceeded), ReallyFailed, Report, "", ""},
}

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tt := range classifyCases {
		got := Classify(tt.obs)
		if got.Classification != tt.class || got.Action != tt.action || got.Trigger != tt.trigger || got.EventID != tt.eventID {
			t.Errorf("%s: Classify = %s/%s trigger %q event %q (%s), want %s/%s trigger %q event %q",
				tt.name, got.Classification, got.Action, got.Trigger, got.EventID, got.Why, tt.class, tt.action, tt.trigger, tt.eventID)
		}
		if got.Why == "" {
			t.Errorf("%s: no explanation", tt.name)
		}
		if got.Classification.Difference() != (got.Action != NoAction) {
			t.Errorf("%s: %s with action %s: a difference needs an action, and only a difference", tt.name, got.Classification, got.Action)
		}
		// The repair applies the trigger through the transition table: it
		// must be a legal move from the order's status.
		if got.Action == ApplyResult {
			_, moves := Next(tt.obs.Status, got.Trigger)
			if !moves && Refund(tt.obs.Status, tt.obs.RefundStatus, got.Trigger) == tt.obs.RefundStatus {
				t.Errorf("%s: trigger %s changes nothing from %s", tt.name, got.Trigger, tt.obs.Status)
			}
		}
	}
}

// A sent event the participant has no record of is sent again as it is (a
// replay, the same event_id) unless the participant's own inbox says it
// processed it: then only a correction (a new event_id) reaches its
// handler. Either way the verdict names the participant, whose inbox the
// reconciler asks.
func TestReplayOrCorrection(t *testing.T) {
	t.Parallel()
	confirmed := Observation{Status: Confirmed, RefundStatus: RefundNone, InventoryAnswered: true, PaymentAnswered: true,
		Reservation: ResReserved, Payment: PaySucceeded,
		OwnEvents: []EventState{{EventID: "e-confirm", Type: "order.confirmed", Status: OutboxSent}}}
	refund := Observation{Status: Cancelled, RefundStatus: RefundPending, InventoryAnswered: true, PaymentAnswered: true,
		Payment: PaySucceeded, OwnEvents: []EventState{{EventID: "e-cancel", Type: "order.cancelled", Status: OutboxSent}}}
	for _, tt := range []struct {
		name      string
		obs       Observation
		processed bool
		action    RepairAction
		service   string
	}{
		{"inventory never got order.confirmed", confirmed, false, ResendEvent, "inventory"},
		{"inventory processed order.confirmed without its effect", confirmed, true, CorrectEvent, "inventory"},
		{"payment never got order.cancelled", refund, false, ResendEvent, "payment"},
		{"payment processed order.cancelled without its effect", refund, true, CorrectEvent, "payment"},
	} {
		first := Classify(tt.obs)
		if first.Action != ResendEvent || first.Service != tt.service {
			t.Fatalf("%s: before the inbox is asked: %s to %q, want %s to %q", tt.name, first.Action, first.Service, ResendEvent, tt.service)
		}
		tt.obs.Processed = map[string]bool{first.EventID: tt.processed}
		got := Classify(tt.obs)
		if got.Action != tt.action || got.Service != tt.service || got.EventID != first.EventID {
			t.Errorf("%s: %s of %s to %q, want %s of %s to %q (%s)", tt.name, got.Action, got.EventID, got.Service,
				tt.action, first.EventID, tt.service, got.Why)
		}
	}
}
