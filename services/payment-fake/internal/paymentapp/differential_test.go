package paymentapp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"
	"pgregory.net/rapid"

	"github.com/relmsg/ordersaga/pkg/base/events"
	"github.com/relmsg/ordersaga/pkg/base/sqldb"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/inbox/batch"
	"github.com/relmsg/ordersaga/pkg/inbox/batch/batchtest"
	"github.com/relmsg/ordersaga/pkg/inbox/inboxtest"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/payment"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentapp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymentbindings"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/paymenttest"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp"
	"github.com/relmsg/ordersaga/services/payment-fake/internal/psp/psptest"
)

// The differential tests of the payment service's three consumers
// (pkg/inbox/batch): the same generated deliveries, one at a time and in
// batches, on two databases each with a fake PSP of its own, end with the
// same payments, refunds, result events, inbox rows, dead letters, PSP
// books, PSP calls by idempotency key, and decisions.

// TestMain gives the package's rapid properties a small default number
// of checks (batchtest.Main; -rapid.checks overrides it).
func TestMain(m *testing.M) { batchtest.Main(m, 30) }

// pspAnswer is how the PSP answers the charge or refund calls of one
// idempotency key, whenever and however concurrently they come: the same in
// both runs. A status query (GET by key) is always answered.
type pspAnswer int

const (
	pspNormal     pspAnswer = iota // the PSP's own answer (customers "decline..." are declined)
	pspLostAfter                   // the PSP does the work, its answer is lost (502): the status query finds it
	pspLostBefore                  // lost before the PSP saw it (503): the status query finds nothing
	pspRefused                     // the PSP refuses (422): nothing done
)

func drawAnswer(t *rapid.T, label string) pspAnswer {
	return rapid.SampledFrom([]pspAnswer{pspNormal, pspNormal, pspNormal, pspLostAfter, pspLostBefore, pspRefused}).Draw(t, label)
}

// pspDoor stands in front of a system's fake PSP: it counts the calls by
// method and idempotency key, and answers each key's calls as told.
type pspDoor struct {
	api     http.Handler
	mu      sync.Mutex
	answers map[string]pspAnswer // by idempotency key; absent: pspNormal
	calls   map[string]int       // "POST charge-1", "GET refund-2"
}

func (p *pspDoor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := idempotencyKey(r)
	if key == "" { // the test's own reading, the switches
		p.api.ServeHTTP(w, r)
		return
	}
	p.mu.Lock()
	p.calls[r.Method+" "+key]++
	answer := p.answers[key]
	p.mu.Unlock()
	if r.Method != http.MethodPost {
		answer = pspNormal
	}
	switch answer {
	case pspLostAfter:
		p.api.ServeHTTP(httptest.NewRecorder(), r)
		writeError(w, http.StatusBadGateway, "answer lost on the way back (test)")
	case pspLostBefore:
		writeError(w, http.StatusServiceUnavailable, "request lost on the way in (test)")
	case pspRefused:
		writeError(w, http.StatusUnprocessableEntity, "refused (test)")
	default:
		p.api.ServeHTTP(w, r)
	}
}

// idempotencyKey is the key of a charge, refund or status query ("" for
// any other call), read from the POST body or the GET path.
func idempotencyKey(r *http.Request) string {
	switch {
	case r.Method == http.MethodPost && (r.URL.Path == "/charges" || r.URL.Path == "/refunds"):
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return ""
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var req struct {
			Key string `json:"idempotency_key"`
		}
		if json.Unmarshal(body, &req) != nil {
			return ""
		}
		return req.Key
	case r.Method == http.MethodGet && (strings.HasPrefix(r.URL.Path, "/charges/") || strings.HasPrefix(r.URL.Path, "/refunds/")):
		return path.Base(r.URL.Path)
	}
	return ""
}

func writeError(w http.ResponseWriter, status int, msg string) {
	http.Error(w, `{"error":"`+msg+`"}`, status) // the PSP's error body
}

// paymentSystem is one run: the service's three consumers as it wires
// them, on a database of its own, with a fake PSP of its own behind a
// pspDoor.
type paymentSystem struct {
	db   *sqldbtest.DB
	door *pspDoor
	one  map[string]*inbox.Consumer
	many map[string]*batch.Consumer[paymentapp.Store]
	reg  *prometheus.Registry
}

func newPaymentSystem(t *testing.T) *paymentSystem {
	t.Helper()
	db := sqldbtest.New(t, "payment")
	door := &pspDoor{api: psp.NewServer(db.DB, quiet).Handler()}
	app := paymentapp.New(db.DB, psp.NewClient(psptest.Serve(t, door), &http.Client{Timeout: 10 * time.Second}), quiet, nil, longDeadlines)
	s := &paymentSystem{db: db, door: door, reg: prometheus.NewRegistry(),
		one: map[string]*inbox.Consumer{}, many: map[string]*batch.Consumer[paymentapp.Store]{}}
	in, bm := inbox.NewMetrics(s.reg), batch.NewMetrics(s.reg)
	for name, hs := range map[string]batch.Handlers[paymentapp.Store]{
		paymentbindings.SagaConsumer:   paymentbindings.SagaHandlers(app),
		paymentbindings.PSPConsumer:    paymentbindings.PSPHandlers(app),
		paymentbindings.RefundConsumer: paymentbindings.RefundHandlers(app),
	} {
		s.one[name], s.many[name] = batch.New(inbox.Config{Name: name, DB: db.DB, Log: quiet, Metrics: in}, hs,
			batch.Options{Metrics: bm})
	}
	return s
}

// paymentScenario is one check, done the same way in both systems: the
// consumer under test; the charges the PSP holds already and the events
// that seed the rows, each through its consumer one at a time; the PSP's
// answer per key; the saga events the steps' actions deliver; the steps.
type paymentScenario struct {
	consumer string
	held     []events.PaymentChargeRequestedV1
	seed     []events.Envelope
	answers  map[string]pspAnswer
	acts     map[string]events.Envelope // "cancel 2": order.cancelled through "payment"
	steps    []batchtest.Step
}

// actRecover is the action after which the PSP answers every key normally.
const actRecover = "psp recovers"

// heldChargeID is the id of a charge the PSP holds from the start: the
// same in both runs, so that refund requests can name it.
func heldChargeID(orderID uint64) string { return fmt.Sprint("ch_held_", orderID) }

// prepare empties the tables (one transaction: one commit to wait for),
// sets the PSP's answers, and seeds sc's starting rows. The PSP's held
// charges go into its books directly: an earlier attempt under the key
// that the PSP charged, which the consumer's call then gets back.
func (s *paymentSystem) prepare(ctx context.Context, sc *paymentScenario) error {
	err := sqldb.WithTx(ctx, s.db.DB, func(tx *sqlx.Tx) error {
		for _, table := range []string{"payments", "refunds", "consumer_inbox", "outbox_events", "dead_letters",
			"psp_refunds", "psp_charges"} {
			if _, err := tx.ExecContext(ctx, "DELETE FROM "+table); err != nil {
				return err
			}
		}
		const q = `INSERT INTO psp_charges (charge_id, idempotency_key, order_ref, customer_id, amount_cents, currency, status)
VALUES (?, ?, ?, ?, ?, ?, 'succeeded')`
		for _, c := range sc.held {
			if _, err := tx.ExecContext(ctx, q, heldChargeID(c.OrderID), c.IdempotencyKey,
				strconv.FormatUint(c.OrderID, 10), c.CustomerID, c.AmountCents, c.Currency); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.door.mu.Lock()
	s.door.answers, s.door.calls = maps.Clone(sc.answers), map[string]int{}
	s.door.mu.Unlock()
	for _, e := range sc.seed {
		if err := s.one[consumerOf[e.Type]].Process(ctx, e); err != nil {
			return fmt.Errorf("seed %s of order %d: %w", e.Type, e.AggregateID, err)
		}
	}
	return nil
}

var consumerOf = map[events.Type]string{
	events.InventoryReserved:      paymentbindings.SagaConsumer,
	events.OrderCancelled:         paymentbindings.SagaConsumer,
	events.PaymentChargeRequested: paymentbindings.PSPConsumer,
	events.PaymentRefundRequested: paymentbindings.RefundConsumer,
}

func (s *paymentSystem) system(sc *paymentScenario) batchtest.System {
	return batchtest.System{One: s.one[sc.consumer].Handle, Many: s.many[sc.consumer].HandleBatch,
		Act: func(ctx context.Context, name string) error {
			if name == actRecover {
				s.door.mu.Lock()
				defer s.door.mu.Unlock()
				s.door.answers = nil
				return nil
			}
			e, ok := sc.acts[name]
			if !ok {
				return fmt.Errorf("no action %q", name)
			}
			return s.one[consumerOf[e.Type]].Process(ctx, e)
		},
		Prepare: func(ctx context.Context) error { return s.prepare(ctx, sc) },
		Rows:    s.rows,
	}
}

// rows are what the comparison reads: every table the consumers write,
// the PSP's books, without times; the PSP's random charge and refund ids
// replaced by their idempotency keys (then the lines are sorted again);
// and the PSP calls by method and key, counted exactly: a batch of the
// external consumers that rolled back would call again (doc.go), but none
// of these scenarios rolls one back (WantBatches logs the fallbacks), so a
// call more is a difference.
func (s *paymentSystem) rows(ctx context.Context) (map[string][]string, error) {
	queries := map[string]string{
		"payments": `SELECT order_id, customer_id, amount_cents, currency, status, idempotency_key, psp_charge_id,
  failure_reason, charge_sent_at IS NULL, cancel_requested_at IS NULL, cancel_reason, sweep_rounds, attempts,
  last_error, parked_at IS NULL, parked_reason, aggregate_version FROM payments ORDER BY order_id`,
		"refunds": `SELECT order_id, idempotency_key, psp_charge_id, amount_cents, status, psp_refund_id, reason,
  sweep_rounds, attempts, last_error, parked_at IS NULL, parked_reason FROM refunds ORDER BY order_id`,
		"outbox": `SELECT aggregate_id, aggregate_version, event_type, schema_version, payload
FROM outbox_events ORDER BY aggregate_id, aggregate_version, event_type`,
		"inbox":        `SELECT consumer_name, event_id, payload_sha256 FROM consumer_inbox ORDER BY consumer_name, event_id`,
		"dead letters": `SELECT consumer_name, event_id, event_type, routing_key, reason, attempts, status FROM dead_letters ORDER BY consumer_name, event_id`,
		"psp charges": `SELECT charge_id, idempotency_key, order_ref, customer_id, amount_cents, currency, status, decline_code
FROM psp_charges ORDER BY idempotency_key`,
		"psp refunds": `SELECT refund_id, idempotency_key, charge_id, amount_cents, status FROM psp_refunds ORDER BY idempotency_key`,
	}
	rows, err := batchtest.Rows(ctx, s.db.DB, queries)
	if err != nil {
		return nil, err
	}
	var ids []struct {
		ID  string `db:"id"`
		Key string `db:"idempotency_key"`
	}
	const q = `SELECT charge_id AS id, idempotency_key FROM psp_charges UNION ALL SELECT refund_id, idempotency_key FROM psp_refunds`
	if err := s.db.SelectContext(ctx, &ids, q); err != nil {
		return nil, err
	}
	var pairs []string
	for _, id := range ids {
		pairs = append(pairs, id.ID, "<id of "+id.Key+">")
	}
	named := strings.NewReplacer(pairs...)
	for name := range queries {
		lines := rows[name]
		for i := range lines {
			lines[i] = named.Replace(lines[i])
		}
		slices.Sort(lines)
		rows[name] = lines
	}
	s.door.mu.Lock()
	defer s.door.mu.Unlock()
	calls := []string{}
	for call, n := range s.door.calls {
		calls = append(calls, fmt.Sprintf("%s: %d", call, n))
	}
	slices.Sort(calls)
	rows["psp calls"] = calls
	return rows, nil
}

// checkSame seeds both systems, runs sc's steps one at a time in one and
// in batches of size in many (batchtest.Same), and returns the decisions.
func checkSame(t batchtest.TB, one, many *paymentSystem, sc *paymentScenario, size int) []string {
	t.Helper()
	return batchtest.Same(t, one.system(sc), many.system(sc), sc.steps, size)
}

// differential runs the property of one consumer: scenarios drawn by gen,
// both ways, in batches of a drawn size; and batches must have committed.
func differential(t *testing.T, consumer string, gen func(*rapid.T) *paymentScenario) {
	t.Parallel()
	one, many := newPaymentSystem(t), newPaymentSystem(t)
	rapid.Check(t, func(rt *rapid.T) {
		checkSame(rt, one, many, gen(rt), batchtest.Sizes(rt))
	})
	batchtest.WantBatches(t, many.reg, consumer)
}

func TestSagaBatchesDecideAsOneAtATime(t *testing.T) {
	differential(t, paymentbindings.SagaConsumer, sagaScenario)
}

func TestChargeBatchesDecideAsOneAtATime(t *testing.T) {
	differential(t, paymentbindings.PSPConsumer, chargeScenario)
}

func TestRefundBatchesDecideAsOneAtATime(t *testing.T) {
	differential(t, paymentbindings.RefundConsumer, refundScenario)
}

// sagaScenario draws the saga's events for two or three orders: an
// inventory.reserved (amount and customer drawn, now and then an invalid
// amount), sometimes a second one under another id (the same facts, or
// others), a cancel before or after it, sometimes a second cancel; some
// orders are paid already (seeded), so that their cancel requests a refund.
func sagaScenario(t *rapid.T) *paymentScenario {
	sc := &paymentScenario{consumer: paymentbindings.SagaConsumer}
	var perOrder [][]batchtest.Item
	for o := uint64(1); o <= uint64(rapid.IntRange(2, 3).Draw(t, "orders")); o++ {
		customer := rapid.SampledFrom([]string{"c-1", "c-2", "decline-1"}).Draw(t, "customer")
		amount := rapid.SampledFrom([]int64{2500, 1200}).Draw(t, "amount")
		if rapid.IntRange(0, 7).Draw(t, "invalid amount") == 0 {
			amount = 0 // a dead letter; it also rolls back the batch it is in
		}
		var is []batchtest.Item
		if amount > 0 && rapid.IntRange(0, 3).Draw(t, "paid already") == 0 {
			req := chargeRequested(o, customer, amount)
			sc.held = append(sc.held, req)
			sc.seed = append(sc.seed, paymenttest.Reserved(o, customer, amount), ownEvent(events.PaymentChargeRequested, o, 1, req))
		} else {
			is = batchtest.Events(paymenttest.Reserved(o, customer, amount))
		}
		switch rapid.IntRange(0, 4).Draw(t, "second reserved") {
		case 0:
			is = append(is, batchtest.Events(paymenttest.Reserved(o, customer, amount))...)
		case 1:
			is = append(is, batchtest.Events(paymenttest.Reserved(o, customer, amount+100))...)
		}
		if rapid.Bool().Draw(t, "cancel") {
			c := batchtest.Events(paymenttest.Cancelled(o, "customer asked"))
			if rapid.Bool().Draw(t, "cancel first") {
				is = append(c, is...)
			} else {
				is = append(is, c...)
			}
			if rapid.IntRange(0, 3).Draw(t, "second cancel") == 0 {
				is = append(is, batchtest.Events(paymenttest.Cancelled(o, "asked again"))...)
			}
		}
		perOrder = append(perOrder, is)
	}
	sc.steps = batchtest.Steps(t, paymentbindings.SagaQueue, batchtest.Arrival(t, perOrder))
	return sc
}

// chargeScenario draws charge requests for two or three orders, each with
// its customer (some declined by the PSP), amount (some over its limit)
// and the PSP's answer to its key; mostly with a payment seeded by
// inventory.reserved, sometimes none. Around each request: the same event
// again (a retry, a redelivery), the same request under another id (the
// sweep's), one that does not match its payment (under its own id or the
// request's), the order's cancel arriving, the PSP recovering.
func chargeScenario(t *rapid.T) *paymentScenario {
	sc := &paymentScenario{consumer: paymentbindings.PSPConsumer, answers: map[string]pspAnswer{},
		acts: map[string]events.Envelope{}}
	var perOrder [][]batchtest.Item
	for o := uint64(1); o <= uint64(rapid.IntRange(2, 3).Draw(t, "orders")); o++ {
		customer := rapid.SampledFrom([]string{fmt.Sprint("c-", o), fmt.Sprint("decline-", o)}).Draw(t, "customer")
		amount := rapid.SampledFrom([]int64{2500, 1200, psp.MaxAmountCents + 1}).Draw(t, "amount")
		sc.answers[payment.ChargeKey(o)] = drawAnswer(t, "charge answer")
		if rapid.IntRange(0, 5).Draw(t, "no payment") != 0 {
			sc.seed = append(sc.seed, paymenttest.Reserved(o, customer, amount))
		}
		req := ownEvent(events.PaymentChargeRequested, o, 1, chargeRequested(o, customer, amount))
		other := ownEvent(events.PaymentChargeRequested, o, 1, chargeRequested(o, customer, amount+1))
		is := requestItems(t, req, other)
		if rapid.IntRange(0, 2).Draw(t, "cancel") == 0 {
			name := fmt.Sprint("cancel ", o)
			sc.acts[name] = paymenttest.Cancelled(o, "customer asked")
			is = slices.Insert(is, rapid.IntRange(0, len(is)).Draw(t, "cancel at"), batchtest.Item{Action: name})
		}
		perOrder = append(perOrder, is)
	}
	sc.steps = batchtest.Steps(t, paymentbindings.PSPQueue, batchtest.Arrival(t, perOrder))
	return sc
}

// refundScenario draws refund requests for two or three orders, each with
// the PSP's answer to its refund key; mostly a paid and cancelled order
// (seeded: reserved, charged, cancelled, one at a time), sometimes one
// whose payment is only pending (no refund to request). Around each
// request the same variants as chargeScenario's.
func refundScenario(t *rapid.T) *paymentScenario {
	sc := &paymentScenario{consumer: paymentbindings.RefundConsumer, answers: map[string]pspAnswer{}}
	var perOrder [][]batchtest.Item
	for o := uint64(1); o <= uint64(rapid.IntRange(2, 3).Draw(t, "orders")); o++ {
		customer := fmt.Sprint("c-", o)
		amount := rapid.SampledFrom([]int64{2500, 1200}).Draw(t, "amount")
		sc.answers[payment.RefundKey(o)] = drawAnswer(t, "refund answer")
		sc.seed = append(sc.seed, paymenttest.Reserved(o, customer, amount))
		if rapid.IntRange(0, 5).Draw(t, "not paid") != 0 {
			charge := chargeRequested(o, customer, amount)
			sc.held = append(sc.held, charge)
			sc.seed = append(sc.seed, ownEvent(events.PaymentChargeRequested, o, 1, charge), paymenttest.Cancelled(o, "customer asked"))
		}
		req := ownEvent(events.PaymentRefundRequested, o, 3, refundRequested(o, amount))
		other := ownEvent(events.PaymentRefundRequested, o, 3, refundRequested(o, amount-1))
		perOrder = append(perOrder, requestItems(t, req, other))
	}
	sc.steps = batchtest.Steps(t, paymentbindings.RefundQueue, batchtest.Arrival(t, perOrder))
	return sc
}

// requestItems draws what happens to an order's request req: it arrives,
// and maybe again (a retry, a redelivery), maybe under another id (the
// sweep's re-request), maybe as other (a request that does not match the
// row it names) under its own id or req's (a payload mismatch), maybe the
// PSP recovers in between.
func requestItems(t *rapid.T, req, other events.Envelope) []batchtest.Item {
	is := batchtest.Events(req)
	if rapid.IntRange(0, 2).Draw(t, "again") == 0 {
		is = append(is, batchtest.Events(req)...)
	}
	if rapid.Bool().Draw(t, "another id") {
		again := req
		again.EventID = uuid.NewString()
		is = append(is, batchtest.Events(again)...)
	}
	if rapid.IntRange(0, 4).Draw(t, "mismatch") == 0 {
		if rapid.Bool().Draw(t, "under the request's id") {
			other.EventID = req.EventID
		}
		at := rapid.IntRange(0, len(is)).Draw(t, "mismatch at")
		is = slices.Insert(is, at, batchtest.Item{Event: other})
	}
	if rapid.IntRange(0, 3).Draw(t, "recovers") == 0 {
		is = slices.Insert(is, rapid.IntRange(0, len(is)).Draw(t, "recovers at"), batchtest.Item{Action: actRecover})
	}
	return is
}

// chargeRequested and refundRequested are the requests as the service
// builds them (intake.go, refund.go); ownEvent is the envelope of one of
// the service's own events.
func chargeRequested(orderID uint64, customer string, amount int64) events.PaymentChargeRequestedV1 {
	return events.PaymentChargeRequestedV1{OrderID: orderID, CustomerID: customer, AmountCents: amount,
		Currency: "EUR", IdempotencyKey: payment.ChargeKey(orderID)}
}

func refundRequested(orderID uint64, amount int64) events.PaymentRefundRequestedV1 {
	return events.PaymentRefundRequestedV1{OrderID: orderID, ChargeID: heldChargeID(orderID), AmountCents: amount,
		IdempotencyKey: payment.RefundKey(orderID)}
}

func ownEvent(typ events.Type, orderID, version uint64, payload any) events.Envelope {
	body, err := json.Marshal(payload)
	if err != nil {
		panic(err)
	}
	return events.Envelope{EventID: uuid.NewString(), Type: typ, AggregateID: orderID, AggregateVersion: version,
		SchemaVersion: 1, CorrelationID: strconv.FormatUint(orderID, 10), OccurredAt: time.Now().UTC(), Payload: body}
}

// Shrunk counterexamples, each a test of its own.

// An external event and its exact copy in one take, nothing else
// batchable (the crash of the issue): no panic, one call at the PSP, both
// deliveries acked, one inbox row; as one at a time. The requests are
// built as the service builds them: the same payload as its outbox row.
func TestBatchOfAnExternalEventAndItsCopy(t *testing.T) {
	t.Parallel()
	charge := chargeRequested(1, "c-1", 2500)
	for _, tc := range []struct {
		consumer, queue string
		sc              paymentScenario
		req             events.Envelope
		key, pspTable   string
	}{
		{consumer: paymentbindings.PSPConsumer, queue: paymentbindings.PSPQueue,
			sc:  paymentScenario{seed: []events.Envelope{paymenttest.Reserved(1, "c-1", 2500)}},
			req: ownEvent(events.PaymentChargeRequested, 1, 1, charge), key: "charge-1", pspTable: "psp_charges"},
		{consumer: paymentbindings.RefundConsumer, queue: paymentbindings.RefundQueue,
			sc: paymentScenario{held: []events.PaymentChargeRequestedV1{charge}, seed: []events.Envelope{paymenttest.Reserved(1, "c-1", 2500),
				ownEvent(events.PaymentChargeRequested, 1, 1, charge), paymenttest.Cancelled(1, "customer asked")}},
			req: ownEvent(events.PaymentRefundRequested, 1, 3, refundRequested(1, 2500)), key: "refund-1", pspTable: "psp_refunds"},
	} {
		t.Run(tc.consumer, func(t *testing.T) {
			t.Parallel()
			one, many := newPaymentSystem(t), newPaymentSystem(t)
			sc := tc.sc
			sc.consumer = tc.consumer
			d := inboxtest.Delivery(tc.queue, tc.req)
			sc.steps = []batchtest.Step{{Take: []rabbit.Delivery{d, d}}}
			if got := checkSame(t, one, many, &sc, 16); !slices.Equal(got, []string{"ack", "ack"}) {
				t.Fatalf("decisions %v, want [ack ack]", got)
			}
			// A panic the batch layer recovers from rolls back and falls back.
			if n := inboxtest.Counter(t, many.reg, "consumer_batch_fallbacks_total", tc.consumer); n != 0 {
				t.Errorf("%v batches rolled back, want none", n)
			}
			var written string
			if err := many.db.Get(&written, `SELECT payload FROM outbox_events WHERE event_type = ?`, tc.req.Type); err != nil {
				t.Fatal(err)
			}
			if written != string(tc.req.Payload) {
				t.Errorf("the test builds %s as %s, the service as %s", tc.req.Type, tc.req.Payload, written)
			}
			many.door.mu.Lock()
			calls := many.door.calls["POST "+tc.key]
			many.door.mu.Unlock()
			var n struct{ PSP, Inbox int }
			q := `SELECT (SELECT COUNT(*) FROM ` + tc.pspTable + `) AS psp,
  (SELECT COUNT(*) FROM consumer_inbox WHERE consumer_name = ? AND event_id = ?) AS inbox`
			if err := many.db.Get(&n, q, tc.consumer, tc.req.EventID); err != nil {
				t.Fatal(err)
			}
			if calls != 1 || n.PSP != 1 || n.Inbox != 1 {
				t.Errorf("POST %s reached the PSP %d times, %s has %d rows, the inbox %d: want 1 each",
					tc.key, calls, tc.pspTable, n.PSP, n.Inbox)
			}
		})
	}
}
