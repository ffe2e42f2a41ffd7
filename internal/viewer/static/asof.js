// The tables of one order as they were at each step of its timeline,
// rebuilt from the steps the diagram draws (buildSteps). Nothing here asks
// a service: each step is replayed as the change it records (a row
// written, a status changed, a message published or consumed), in the
// order of the diagram, so the rows after step i are what step i left.
//
// What no table records is not invented: an outbox row is "pending" until
// its sent_at (its claim, "sending", is not kept; a row never sent shows
// its current status at the last step), a reservation or a payment shows
// its first state and its last change, and a message counts as waiting in
// a queue from its sent_at (the confirm recorded) until its consumer's
// inbox row, dead letter or parked record. A consumer that committed
// before the confirm was recorded leaves the message uncounted; one that
// acked without its inbox row (the wrong way ack-before-commit) leaves it
// counted: no table says it left.
"use strict";

// ASOF_LAYOUT is where each table is drawn: RabbitMQ's queues in a strip
// above, then a column per service database, in the diagram's order (the
// PSP's books under payment's).
const ASOF_LAYOUT = [
  [{ lane: "order", tables: ["orders", "order_history", "outbox_events", "consumer_inbox", "reconciliation_audit", "dead_letters", "parked_events"] }],
  [{ lane: "inventory", tables: ["reservations", "outbox_events", "consumer_inbox", "event_gaps", "dead_letters", "parked_events"] }],
  [{ lane: "payment", tables: ["payments", "refunds", "outbox_events", "consumer_inbox", "dead_letters", "parked_events"] },
    { lane: "psp", tables: ["psp_charges", "psp_refunds"] }],
];

// ASOF_COLUMNS are the columns shown of each table, named as stored.
const ASOF_COLUMNS = {
  orders: ["order_id", "status", "refund_status"],
  order_history: ["from_status", "to_status", "trigger_name"],
  outbox_events: ["event_type", "aggregate_version", "status", "attempts", "event_id"],
  consumer_inbox: ["consumer_name", "event_id"],
  reservations: ["order_id", "status"],
  payments: ["order_id", "status", "amount_cents"],
  refunds: ["order_id", "status", "amount_cents"],
  psp_charges: ["idempotency_key", "status", "amount_cents"],
  psp_refunds: ["idempotency_key", "status", "amount_cents"],
  reconciliation_audit: ["classification", "action", "outcome"],
  dead_letters: ["consumer_name", "event_type", "status"],
  parked_events: ["consumer_name", "aggregate_version", "expected_version", "applied_at"],
  event_gaps: ["event_type", "received_version", "expected_version", "resolution"],
};

// ASOF_ORDER_ROWS are the order's own rows of inventory and payment, by
// the kind of step that writes one: where it is, and, for the step that
// creates it, the status drawn then when a later step (movedBy) moves it
// (else the status it has by the end, status_now). amount_cents is shown
// where the table has it.
const ASOF_ORDER_ROWS = (() => {
  const reservation = { lane: "inventory", table: "reservations", first: "reserved", movedBy: ["reservation.updated", "reservation.expired"] };
  const payment = { lane: "payment", table: "payments", first: "pending", movedBy: ["payment.updated"] };
  const refund = { lane: "payment", table: "refunds", first: "requested", movedBy: ["refund.updated"] };
  return {
    "reservation.created": reservation, "reservation.expired": reservation, "reservation.updated": reservation,
    "payment.created": payment, "payment.updated": payment,
    "refund.requested": refund, "refund.updated": refund,
  };
})();

// replaySteps returns one frame per step: frames[i] holds every table's
// rows and every queue's waiting messages after step i, with the rows that
// step i changed marked. involved lists the tables that have rows by the
// last step (the tables this order touches).
function replaySteps(steps, story) {
  const tables = {}; // "lane/table" -> Map(key -> {cells, at})
  const queues = (story.queues || []).map((q) => ({ queue: q.queue, consumer: q.consumer, keys: q.keys, waiting: new Map(), at: -1 }));
  const consumed = new Set(); // consumer + " " + event_id: its queue is done with it
  const kinds = new Set(steps.map((s) => s.kind));
  const orderID = story.order_id;

  const put = (lane, table, key, cells, i) => {
    const name = lane + "/" + table;
    const rows = tables[name] || (tables[name] = new Map());
    const old = rows.get(key);
    rows.set(key, { cells: Object.assign({}, old ? old.cells : {}, cells), at: i });
  };
  const leave = (consumer, eventID, i) => {
    consumed.add(consumer + " " + eventID);
    for (const q of queues) {
      if (q.consumer === consumer && q.waiting.delete(eventID)) q.at = i;
    }
  };

  const frames = [];
  steps.forEach((s, i) => {
    const d = s.record || {};
    const svc = s.service;
    // took writes the row by which d's consumer is done with d's message,
    // which then leaves its queue.
    const took = (table, cells) => {
      put(svc, table, d.consumer + " " + d.event_id, cells, i);
      leave(d.consumer, d.event_id, i);
    };
    switch (s.kind) {
      case "order.created":
      case "order.transition": {
        put("order", "orders", orderID, { order_id: orderID, status: d.to, refund_status: d.refund_status || "none" }, i);
        const n = tables["order/order_history"] ? tables["order/order_history"].size : 0;
        put("order", "order_history", "h" + n, { from_status: d.from || "", to_status: d.to, trigger_name: d.trigger }, i);
        break;
      }
      case "outbox.written":
        put(svc, "outbox_events", d.event_id, { event_type: d.event_type, aggregate_version: d.aggregate_version,
          status: "pending", attempts: 0, event_id: d.event_id, corrects_event_id: d.corrects_event_id || "" }, i);
        break;
      case "outbox.sent": {
        const row = d.row || {};
        put(svc, "outbox_events", d.event_id, { event_type: d.event_type, status: "sent",
          attempts: row.attempts !== undefined ? row.attempts : 1, event_id: d.event_id }, i);
        for (const q of queues) {
          if (q.keys.includes(d.event_type) && !consumed.has(q.consumer + " " + d.event_id)) {
            q.waiting.set(d.event_id, d.event_type);
            q.at = i;
          }
        }
        break;
      }
      case "inbox.processed":
        took("consumer_inbox", { consumer_name: d.consumer, event_id: d.event_id, event_type: d.event_type });
        break;
      case "reservation.created":
      case "payment.created":
      case "refund.requested": {
        const r = ASOF_ORDER_ROWS[s.kind];
        put(r.lane, r.table, orderID, { order_id: orderID, status: r.movedBy.some((k) => kinds.has(k)) ? r.first : d.status_now,
          amount_cents: d.amount_cents }, i);
        break;
      }
      case "reservation.expired":
      case "reservation.updated":
      case "payment.updated":
      case "refund.updated": {
        const r = ASOF_ORDER_ROWS[s.kind];
        put(r.lane, r.table, orderID, { order_id: orderID, status: s.kind === "reservation.expired" ? "expired" : d.status }, i);
        break;
      }
      case "psp.charge":
        put("psp", "psp_charges", d.charge_id || d.idempotency_key, { idempotency_key: d.idempotency_key, status: d.status,
          amount_cents: d.amount_cents }, i);
        break;
      case "psp.refund":
        put("psp", "psp_refunds", d.refund_id || d.idempotency_key, { idempotency_key: d.idempotency_key, status: d.status,
          amount_cents: d.amount_cents }, i);
        break;
      case "reconciliation.repair":
        put("order", "reconciliation_audit", d.repair_id, { classification: d.classification, action: d.action, outcome: d.outcome }, i);
        break;
      case "dead_letter":
        took("dead_letters", { consumer_name: d.consumer, event_type: d.event_type, status: d.status });
        break;
      case "parked":
        took("parked_events", { consumer_name: d.consumer, aggregate_version: d.aggregate_version,
          expected_version: d.expected_version !== undefined ? d.expected_version : d.waiting_for_version, applied_at: "" });
        break;
      case "unparked":
        put(svc, "parked_events", d.consumer + " " + d.event_id, { applied_at: d.applied_at || s.at }, i);
        break;
      case "gap.detected":
        put("inventory", "event_gaps", String(d.id || d.event_id), { event_type: d.event_type, received_version: d.received_version,
          expected_version: d.expected_version, resolution: "" }, i);
        break;
      case "gap.resolved":
        put("inventory", "event_gaps", String(d.id || d.event_id), { resolution: d.resolution || "resolved" }, i);
        break;
    }
    if (i === steps.length - 1) nowStatuses(story, put, i);
    frames.push(snapshot(tables, queues, i));
  });
  const involved = new Set(Object.keys(tables));
  return { frames: frames, involved: involved };
}

// nowStatuses gives, at the last step, each outbox row that was never sent
// its current status: when it was claimed, or failed, is not recorded.
function nowStatuses(story, put, i) {
  for (const svc of ["order", "inventory", "payment"]) {
    for (const row of (story.outbox && story.outbox[svc]) || []) {
      if (row.status !== "sent" && row.status !== "pending") {
        put(svc, "outbox_events", row.event_id, { status: row.status, attempts: row.attempts }, i);
      }
    }
  }
}

// snapshot copies the rows as they are after step i.
function snapshot(tables, queues, i) {
  const out = { tables: {}, queues: [] };
  for (const [name, rows] of Object.entries(tables)) {
    out.tables[name] = Array.from(rows.values(), (r) => ({ cells: Object.assign({}, r.cells), changed: r.at === i }));
  }
  for (const q of queues) {
    out.queues.push({ queue: q.queue, consumer: q.consumer, depth: q.waiting.size,
      messages: Array.from(q.waiting.values()), changed: q.at === i });
  }
  return out;
}
