package viewer_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// The step-through in the browser (static/asof.js, static/stepper.js).

// replayStory is an order's story as the viewer's API answers it, cut to
// what the replay reads: the order confirmed by a fast path where the
// order service consumed inventory.reserved at once and payment took it
// later, so that one message waits in one queue for a while.
const replayStory = `{
  "order_id": "7",
  "order": {"order_id": "7", "status": "awaiting_payment", "customer_id": "c-7", "total_cents": 100, "currency": "EUR"},
  "timeline": {"order_id": "7", "entries": [
    {"at": "2026-01-02T10:00:00.000100Z", "service": "order", "kind": "order.created", "detail": {"to": "pending_inventory", "trigger": "create", "refund_status": "none"}},
    {"at": "2026-01-02T10:00:00.000200Z", "service": "order", "kind": "outbox.written", "detail": {"event_id": "e1", "event_type": "order.created", "aggregate_version": 1, "status": "sent", "attempts": 1}},
    {"at": "2026-01-02T10:00:00.005000Z", "service": "order", "kind": "outbox.sent", "detail": {"event_id": "e1", "event_type": "order.created"}},
    {"at": "2026-01-02T10:00:00.009000Z", "service": "inventory", "kind": "inbox.processed", "detail": {"consumer": "inventory", "event_id": "e1", "event_type": "order.created", "from": "order"}},
    {"at": "2026-01-02T10:00:00.009100Z", "service": "inventory", "kind": "reservation.created", "detail": {"status_now": "committed"}},
    {"at": "2026-01-02T10:00:00.009200Z", "service": "inventory", "kind": "outbox.written", "detail": {"event_id": "e2", "event_type": "inventory.reserved", "aggregate_version": 1, "status": "sent", "attempts": 1}},
    {"at": "2026-01-02T10:00:00.012000Z", "service": "inventory", "kind": "outbox.sent", "detail": {"event_id": "e2", "event_type": "inventory.reserved"}},
    {"at": "2026-01-02T10:00:00.015000Z", "service": "order", "kind": "inbox.processed", "detail": {"consumer": "order", "event_id": "e2", "event_type": "inventory.reserved", "from": "inventory"}},
    {"at": "2026-01-02T10:00:00.015100Z", "service": "order", "kind": "order.transition", "detail": {"from": "pending_inventory", "to": "awaiting_payment", "trigger": "inventory.reserved", "refund_status": "none"}},
    {"at": "2026-01-02T10:00:00.015200Z", "service": "order", "kind": "outbox.written", "detail": {"event_id": "e3", "event_type": "order.confirmed", "aggregate_version": 2, "status": "failed", "attempts": 10}},
    {"at": "2026-01-02T10:00:00.040000Z", "service": "payment", "kind": "inbox.processed", "detail": {"consumer": "payment", "event_id": "e2", "event_type": "inventory.reserved", "from": "inventory"}},
    {"at": "2026-01-02T10:00:00.050000Z", "service": "inventory", "kind": "reservation.updated", "detail": {"status": "committed"}}
  ]},
  "outbox": {
    "order": [{"event_id": "e1", "event_type": "order.created", "status": "sent", "attempts": 1},
              {"event_id": "e3", "event_type": "order.confirmed", "status": "failed", "attempts": 10}],
    "inventory": [{"event_id": "e2", "event_type": "inventory.reserved", "status": "sent", "attempts": 1}],
    "payment": []
  },
  "reservation": {"order_id": "7", "status": "committed"},
  "payment": null, "psp_charges": [], "psp_refunds": [], "dead_letters": [], "parked": [], "gaps": [], "warnings": [],
  "queues": [
    {"queue": "order.saga-results", "consumer": "order", "keys": ["inventory.reserved"]},
    {"queue": "inventory.order-events", "consumer": "inventory", "keys": ["order.created", "order.confirmed"]},
    {"queue": "payment.saga-events", "consumer": "payment", "keys": ["inventory.reserved"]}
  ]
}`

// replaySummary is JavaScript that replays replayStory and says, for each
// step, what the tables and queues hold after it.
const replaySummary = `(() => {
  const story = JSON.parse(STORY);
  const steps = buildSteps(story);
  const r = replaySteps(steps, story);
  const col = (f, table, c) => (f.tables[table] || []).map((x) => x.cells[c]).join(",");
  return r.frames.map((f, i) => [
    steps[i].kind,
    "orders=" + col(f, "order/orders", "status"),
    "history=" + (f.tables["order/order_history"] || []).length,
    "order.outbox=" + col(f, "order/outbox_events", "status"),
    "inv.inbox=" + (f.tables["inventory/consumer_inbox"] || []).length,
    "res=" + col(f, "inventory/reservations", "status"),
    "queues=" + f.queues.map((q) => q.depth).join(""),
    "changed=" + Object.values(f.tables).flat().filter((x) => x.changed).length + "/" + f.queues.filter((q) => q.changed).length,
  ].join(" ")).join("\n");
})()`

// The replay rebuilds each table as of each step, and a queue's depth from
// the publish and the consumes of each message: inventory.reserved waits
// in payment's queue from its publish until payment's inbox row, while
// the order service, which took it at once, never has it waiting; a row
// never sent shows its current status at the last step only.
func replayFixture(t *testing.T, b *browser) {
	t.Helper()
	got := b.eval(t, strings.Replace(replaySummary, "STORY", jsString(replayStory), 1), `typeof replaySteps === "function"`)
	want := strings.Join([]string{
		"order.created orders=pending_inventory history=1 order.outbox= inv.inbox=0 res= queues=000 changed=2/0",
		"outbox.written orders=pending_inventory history=1 order.outbox=pending inv.inbox=0 res= queues=000 changed=1/0",
		"outbox.sent orders=pending_inventory history=1 order.outbox=sent inv.inbox=0 res= queues=010 changed=1/1",
		"inbox.processed orders=pending_inventory history=1 order.outbox=sent inv.inbox=1 res= queues=000 changed=1/1",
		"reservation.created orders=pending_inventory history=1 order.outbox=sent inv.inbox=1 res=reserved queues=000 changed=1/0",
		"outbox.written orders=pending_inventory history=1 order.outbox=sent inv.inbox=1 res=reserved queues=000 changed=1/0",
		"outbox.sent orders=pending_inventory history=1 order.outbox=sent inv.inbox=1 res=reserved queues=101 changed=1/2",
		"inbox.processed orders=pending_inventory history=1 order.outbox=sent inv.inbox=1 res=reserved queues=001 changed=1/1",
		"order.transition orders=awaiting_payment history=2 order.outbox=sent inv.inbox=1 res=reserved queues=001 changed=2/0",
		"outbox.written orders=awaiting_payment history=2 order.outbox=sent,pending inv.inbox=1 res=reserved queues=001 changed=1/0",
		"inbox.processed orders=awaiting_payment history=2 order.outbox=sent,pending inv.inbox=1 res=reserved queues=000 changed=1/1",
		"reservation.updated orders=awaiting_payment history=2 order.outbox=sent,failed inv.inbox=1 res=committed queues=000 changed=2/0",
	}, "\n")
	if got != want {
		t.Errorf("the replay of a story, step by step:\n%s\nwant:\n%s", got, want)
	}
}

// stepThrough walks the settled order id on screen with every control of
// the step-through, and checks the tables it shows against what the order
// went through.
func stepThrough(t *testing.T, b *browser, id string) {
	t.Helper()
	asof := func(table string) string { return `document.querySelector('#asof [data-table="` + table + `"]')` }
	b.do(t, "the last step", chromedp.Click(chromedp.CSS("#step-last")))
	b.wait(t, "the step-through of order "+id+", at its last step", `document.querySelector("#stepper:not([hidden])") !== null &&
		location.hash === "#/orders/`+id+`" && Number(document.querySelector("#stepper").dataset.step) === document.querySelectorAll("#diagram g.step").length`)
	n := b.eval(t, `document.querySelectorAll("#diagram g.step").length`, `true`)

	b.do(t, "go to the first step", chromedp.Click(chromedp.CSS("#step-first")))
	b.wait(t, "step 1: the order row, its history row, nothing else yet; the later steps faded",
		`document.querySelector("#stepper").dataset.step === "1" && location.hash === "#/orders/`+id+`/steps/1" &&
		 `+asof("order/orders")+`.querySelector("tbody tr.changed td.st").textContent === "pending_inventory" &&
		 `+asof("order/outbox_events")+`.dataset.rows === "0" && `+asof("inventory/consumer_inbox")+`.dataset.rows === "0" &&
		 document.querySelectorAll("#diagram g.step.future").length === `+n+` - 1`)

	// Keys on the bar: the arrow goes to the next step, which writes the
	// OrderCreated outbox row, not yet sent.
	b.do(t, "press the right arrow on the bar", chromedp.Focus(chromedp.CSS("#step-next")), chromedp.KeyEvent(kb.ArrowRight))
	b.wait(t, "step 2: the outbox row, pending", `document.querySelector("#stepper").dataset.step === "2" &&
		`+asof("order/outbox_events")+`.querySelector("tbody tr.changed td.st").textContent === "pending"`)
	b.do(t, "the next button", chromedp.Click(chromedp.CSS("#step-next")))
	b.wait(t, "step 3", `document.querySelector("#stepper").dataset.step === "3" && location.hash === "#/orders/`+id+`/steps/3"`)
	b.do(t, "the previous button", chromedp.Click(chromedp.CSS("#step-prev")))
	b.wait(t, "step 2 again", `document.querySelector("#stepper").dataset.step === "2"`)

	// The slider, to where the order moved to awaiting_payment: the order
	// row says so, inventory's reservation and inbox row are there.
	b.do(t, "move the slider", chromedp.Evaluate[chromedp.Void](`(() => {
		const i = Array.from(document.querySelectorAll("#diagram g.step")).findIndex((g) =>
			g.dataset.kind === "order.transition" && g.dataset.status === "awaiting_payment");
		const s = document.querySelector("#step-slider");
		s.value = String(i + 1);
		s.dispatchEvent(new Event("input", { bubbles: true }));
	})()`))
	b.wait(t, "the step where the order awaits payment", `document.querySelector("#diagram g.step.current").dataset.status === "awaiting_payment" &&
		`+asof("order/orders")+`.querySelector("td.st").textContent === "awaiting_payment" &&
		`+asof("inventory/reservations")+`.querySelector("td.st").textContent === "reserved" &&
		Number(`+asof("inventory/consumer_inbox")+`.dataset.rows) === 1 && `+asof("order/order_history")+`.dataset.rows === "2"`)
	b.shot(t, "viewer-step-through.png", ".timeline")

	// End on the slider: the last step, where the order is confirmed,
	// every outbox row sent, six inbox rows, no message waiting.
	b.do(t, "End on the slider", chromedp.Focus(chromedp.CSS("#step-slider")), chromedp.KeyEvent(kb.End))
	b.wait(t, "the last step: everything as it is now", `document.querySelector("#stepper").dataset.step === "`+n+`" &&
		location.hash === "#/orders/`+id+`" && document.querySelectorAll("#diagram g.step.future").length === 0 &&
		`+asof("order/orders")+`.querySelector("td.st").textContent === "confirmed" &&
		Array.from(document.querySelectorAll('#asof [data-table$="/outbox_events"] td.st')).filter((td) => td.textContent === "sent").length === 5 &&
		Array.from(document.querySelectorAll('#asof [data-table$="/consumer_inbox"]')).reduce((n, tb) => n + Number(tb.dataset.rows), 0) === 6 &&
		document.querySelectorAll("#asof .queues [data-queue]").length === 5 &&
		Array.from(document.querySelectorAll("#asof .queues [data-queue]")).every((q) => q.dataset.depth === "0")`)

	// The diagram takes the keys too.
	b.do(t, "Home on the diagram", chromedp.Focus(chromedp.CSS("#diagram")), chromedp.KeyEvent(kb.Home))
	b.wait(t, "step 1 again", `document.querySelector("#stepper").dataset.step === "1"`)
	b.do(t, "the last step", chromedp.Click(chromedp.CSS("#step-last")))
}

// sharedLink opens the address of step 3 of order id, reloads it, and
// gives the order's address to a second browser that has no cookie: it
// asks for the token, then opens the order it was given.
func sharedLink(t *testing.T, b *browser, chrome, base, id string) {
	t.Helper()
	b.do(t, "open the link", chromedp.Navigate(base+"/#/orders/"+id+"/steps/3"))
	b.reload(t)
	b.wait(t, "the same order at step 3 after the reload", `location.hash === "#/orders/`+id+`/steps/3" &&
		document.querySelector("#stepper").dataset.step === "3" &&
		document.querySelector("#timeline-head h2").textContent.includes("#`+id+`") &&
		document.querySelector('#diagram g.step.current[data-i="2"]') !== null`)

	other := newBrowser(t, chrome)
	other.do(t, "open the shared link without the cookie", chromedp.Navigate(base+"/#/orders/"+id))
	other.wait(t, "the page to ask for the token", `document.querySelector("#token-dialog").open === true`)
	other.do(t, "give the token",
		chromedp.SetValue(chromedp.CSS("#token-input"), tokenOf(base)),
		chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)))
	other.wait(t, "the shared order, confirmed, with the token gone from the address",
		`location.search === "" && location.hash === "#/orders/`+id+`" &&
		 document.querySelector("#timeline-head .pill") && document.querySelector("#timeline-head .pill").dataset.status === "confirmed"`)
	if errs := other.consoleErrors(); len(errs) > 0 {
		t.Errorf("the other browser logged %d console error(s):\n  %s", len(errs), strings.Join(errs, "\n  "))
	}
}
