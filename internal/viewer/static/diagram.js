// The sequence diagram of one order: one lane per participant (order,
// RabbitMQ, inventory, payment, PSP), one row per step in time order. A step
// inside one service is a box on its lane; a message or a call is an arrow
// between lanes. Built as an SVG string from the viewer's story of the order
// (GET /api/orders/{id}/story).
"use strict";

const LANES = ["order", "rabbit", "inventory", "payment", "psp"];

// buildSteps turns a story into the diagram's steps, in time order.
function buildSteps(story) {
  const outboxByID = {};
  const eventByID = {};
  for (const svc of ["order", "inventory", "payment"]) {
    for (const row of (story.outbox && story.outbox[svc]) || []) {
      outboxByID[row.event_id] = Object.assign({ service: svc }, row);
      eventByID[row.event_id] = { service: svc, type: row.event_type };
    }
  }
  const raw = [];
  const add = (at, service, kind, detail) => { if (at) raw.push({ at: at, service: service, kind: kind, detail: detail || {} }); };

  if (story.timeline && story.timeline.entries) {
    for (const e of story.timeline.entries) raw.push(e);
  } else {
    // No order: draw what the other services recorded.
    for (const svc of ["order", "inventory", "payment"]) {
      for (const row of (story.outbox && story.outbox[svc]) || []) {
        add(row.created_at, svc, "outbox.written", { event_id: row.event_id, event_type: row.event_type,
          aggregate_version: row.aggregate_version, status: row.status, attempts: row.attempts });
        add(row.sent_at, svc, "outbox.sent", { event_id: row.event_id, event_type: row.event_type });
      }
      for (const row of (story.inbox && story.inbox[svc]) || []) {
        const ev = eventByID[row.event_id] || {};
        add(row.processed_at, svc, "inbox.processed", { consumer: row.consumer, event_id: row.event_id,
          event_type: ev.type || "?", from: ev.service || "?" });
      }
    }
    const res = story.reservation;
    if (res) {
      add(res.created_at, "inventory", "reservation.created", { status_now: res.status });
      if (res.updated_at && res.updated_at !== res.created_at) add(res.updated_at, "inventory", "reservation.updated", { status: res.status, reason: res.reason });
    }
    const pay = story.payment;
    if (pay) {
      add(pay.created_at, "payment", "payment.created", { status_now: pay.status, amount_cents: pay.amount_cents });
      if (pay.updated_at && pay.updated_at !== pay.created_at) add(pay.updated_at, "payment", "payment.updated", { status: pay.status });
    }
  }
  const base = raw.length;
  // What the timeline does not carry.
  for (const c of story.psp_charges || []) add(c.created_at, "psp", "psp.charge", c);
  for (const f of story.psp_refunds || []) add(f.created_at, "psp", "psp.refund", f);
  for (const dl of story.dead_letters || []) add(dl.first_failed_at, dl.service, "dead_letter", dl);
  for (const p of story.parked || []) {
    add(p.parked_at, p.service, "parked", p);
    if (p.applied_at) add(p.applied_at, p.service, "unparked", p);
  }
  for (const g of story.gaps || []) {
    add(g.detected_at, "inventory", "gap.detected", g);
    if (g.resolved_at) add(g.resolved_at, "inventory", "gap.resolved", g);
  }
  const entries = raw.map((e, i) => ({ e: e, i: i, ms: Date.parse(e.at) }));
  entries.sort((a, b) => (a.ms - b.ms) || (a.i - b.i));

  let zero = null;
  for (const x of entries) if (x.e.kind === "order.created") { zero = x.ms; break; }
  if (zero === null && entries.length) zero = entries[0].ms;

  const steps = [];
  for (const x of entries) {
    const s = describe(x.e, { outboxByID: outboxByID, eventByID: eventByID, story: story, fromTimeline: x.i < base });
    if (!s) continue;
    s.ms = x.ms - zero;
    s.at = x.e.at;
    steps.push(s);
  }
  return withCopies(steps);
}

// withCopies draws, after each re-send, the copy every consumer of the
// event may receive again and its inbox drops. No table records that
// delivery (the metric consumer_duplicates_suppressed_total counts it), so
// it is drawn dashed, as what the inbox key guarantees.
function withCopies(steps) {
  const consumers = {};
  for (const s of steps) {
    if (s.kind === "inbox.processed") (consumers[s.record.event_id] = consumers[s.record.event_id] || []).push(s);
  }
  const out = [];
  for (const s of steps) {
    out.push(s);
    if (s.kind !== "outbox.sent" || !s.resent) continue;
    for (const c of consumers[s.record.event_id] || []) {
      out.push({ kind: "inbox.duplicate", service: c.service, lane: "rabbit", to: c.to,
        cls: "k-inbox k-dup", status: c.record.consumer, dropped: true, ms: s.ms, at: s.at, record: c.record,
        where: c.where, title: t("k.inbox.duplicate", { type: c.record.event_type }),
        sub: t("k.inbox.duplicate.sub", { consumer: c.record.consumer, event: shortID(c.record.event_id) }) });
    }
  }
  return out;
}

function shortID(id) {
  id = String(id || "");
  return id.length > 13 ? id.slice(0, 8) + "…" + id.slice(-4) : id;
}

function money(cents, currency) {
  if (cents === undefined || cents === null) return "";
  return (cents / 100).toFixed(2) + " " + (currency || "EUR");
}

// describe maps one entry to a diagram step: where it is drawn (a box on
// lane, or an arrow from lane to lane), its text, its colour class, the
// record behind it and the table that stores it.
function describe(e, ctx) {
  const d = e.detail || {};
  const svc = e.service;
  const s = { kind: e.kind, service: svc, record: d, status: "" };
  const table = (name) => svc + " service · " + name;
  switch (e.kind) {
    case "order.created":
      Object.assign(s, { lane: "order", cls: "k-order", status: d.to,
        title: t("k.order.created", { to: d.to }), sub: t("k.order.created.sub"), where: "order service · orders, order_history, outbox_events" });
      return s;
    case "order.transition": {
      const moved = d.from !== d.to;
      Object.assign(s, { lane: "order", cls: "k-order", status: d.to, where: "order service · orders, order_history",
        title: moved ? t("k.order.transition", { from: d.from, to: d.to }) : t("k.order.refund", { refund: d.refund_status }),
        sub: t("k.order.transition.sub", { trigger: d.trigger }) + (d.reason ? " · " + d.reason : "") +
          (d.repair_id ? " · repair " + shortID(d.repair_id) : "") });
      if (/cancel|reject/.test(d.to || "")) s.cls = "k-order k-bad";
      return s;
    }
    case "outbox.written": {
      const row = ctx.outboxByID[d.event_id] || {};
      const status = row.status || d.status;
      const attempts = row.attempts !== undefined ? row.attempts : d.attempts;
      let path = t("k.outbox.path." + status, { claim: shortID(row.claim_token) });
      if (path.startsWith("k.outbox.path")) path = status;
      if (attempts > 0) path += " · " + t("k.outbox.attempts", { n: attempts });
      Object.assign(s, { lane: svc, cls: "k-outbox", status: status, where: table("outbox_events"),
        record: Object.assign({}, d, { row: row }),
        title: t("k.outbox.written", { type: d.event_type, version: d.aggregate_version }),
        sub: t("k.outbox.written.sub", { event: shortID(d.event_id), path: path }) });
      if (status === "failed") s.cls = "k-outbox k-bad";
      // A correction: a new event that names the one it corrects.
      if (d.corrects_event_id) s.note = t("k.outbox.corrects", { event: shortID(d.corrects_event_id) });
      return s;
    }
    case "outbox.sent": {
      const row = ctx.outboxByID[d.event_id] || {};
      Object.assign(s, { lane: svc, to: "rabbit", cls: "k-message", status: "sent", where: table("outbox_events") + " (sent_at)",
        record: Object.assign({}, d, { row: row }),
        title: t("k.outbox.sent", { type: d.event_type }), sub: t("k.outbox.sent.sub") });
      if (row.attempts > 1) { s.note = t("k.outbox.resent", { n: row.attempts }); s.resent = true; }
      return s;
    }
    case "inbox.processed": {
      const row = ctx.outboxByID[d.event_id] || {};
      Object.assign(s, { lane: "rabbit", to: svc, cls: "k-inbox", status: d.consumer, where: table("consumer_inbox"),
        title: t("k.inbox.processed", { type: d.event_type }),
        sub: t("k.inbox.processed.sub", { consumer: d.consumer, event: shortID(d.event_id) }) });
      return s;
    }
    case "reservation.created":
      Object.assign(s, { lane: "inventory", cls: "k-business", status: d.status_now, where: "inventory service · reservations, reservation_items, stock",
        record: Object.assign({}, d, { reservation: ctx.story.reservation }),
        title: t("k.reservation.created"), sub: t("k.reservation.created.sub", { status: d.status_now }) });
      return s;
    case "reservation.updated":
      Object.assign(s, { lane: "inventory", cls: "k-business", status: d.status, where: "inventory service · reservations, stock",
        record: Object.assign({}, d, { reservation: ctx.story.reservation }),
        title: d.status === "released" ? t("k.reservation.released") : t("k.reservation.updated", { status: d.status }),
        sub: d.reason || "" });
      if (d.status === "released" || d.status === "restocked") s.cls = "k-business k-comp";
      return s;
    case "reservation.expired":
      Object.assign(s, { lane: "inventory", cls: "k-business k-bad", status: "expired", where: "inventory service · reservations",
        title: t("k.reservation.expired"), sub: d.expires_at ? "expires_at " + d.expires_at : "" });
      return s;
    case "payment.created": {
      const pay = ctx.story.payment || {};
      Object.assign(s, { lane: "payment", cls: "k-business", status: d.status_now, where: "payment service · payments",
        record: Object.assign({}, d, { payment: pay }),
        title: t("k.payment.created", { amount: money(d.amount_cents, pay.currency) }),
        sub: t("k.payment.created.sub", { key: pay.idempotency_key || "?", status: d.status_now }) });
      return s;
    }
    case "payment.updated":
      Object.assign(s, { lane: "payment", cls: "k-business", status: d.status, where: "payment service · payments",
        record: Object.assign({}, d, { payment: ctx.story.payment }),
        title: t("k.payment.updated", { status: d.status }), sub: d.failure_reason || d.psp_charge_id || "" });
      if (d.status === "failed" || d.status === "needs_attention") s.cls = "k-business k-bad";
      return s;
    case "refund.requested": {
      const refund = (ctx.story.payment && ctx.story.payment.refund) || {};
      Object.assign(s, { lane: "payment", cls: "k-business k-comp", status: d.status_now, where: "payment service · refunds",
        record: Object.assign({}, d, { refund: refund }),
        title: t("k.refund.requested", { amount: money(d.amount_cents) }),
        sub: t("k.refund.requested.sub", { key: refund.idempotency_key || "?", status: d.status_now }) });
      return s;
    }
    case "refund.updated":
      Object.assign(s, { lane: "payment", cls: "k-business k-comp", status: d.status, where: "payment service · refunds",
        title: t("k.refund.updated", { status: d.status }), sub: d.psp_refund_id || "" });
      return s;
    case "psp.charge":
      Object.assign(s, { lane: "payment", to: "psp", cls: "k-psp", status: d.status, where: "PSP · psp_charges (its own books)",
        title: t("k.psp.charge", { key: d.idempotency_key }),
        sub: t("k.psp.charge.sub", { status: d.status, detail: d.decline_code || d.charge_id }) });
      if (d.status === "declined") s.cls = "k-psp k-bad";
      return s;
    case "psp.refund":
      Object.assign(s, { lane: "payment", to: "psp", cls: "k-psp k-comp", status: d.status, where: "PSP · psp_refunds",
        title: t("k.psp.refund", { key: d.idempotency_key }), sub: t("k.psp.refund.sub", { status: d.status, id: d.refund_id }) });
      return s;
    case "reconciliation.repair":
      Object.assign(s, { lane: "order", cls: "k-fault", status: d.outcome, where: "order service · reconciliation_audit",
        title: t("k.repair", { classification: d.classification, action: d.action }),
        sub: t("k.repair.sub", { id: shortID(d.repair_id), outcome: d.outcome }) });
      return s;
    case "dead_letter":
      Object.assign(s, { lane: svc, cls: "k-fault", status: d.status, where: table("dead_letters"),
        title: t("k.dead_letter", { consumer: d.consumer }),
        sub: t("k.dead_letter.sub", { reason: d.reason, attempts: d.attempts, status: d.status }) });
      return s;
    case "parked":
      Object.assign(s, { lane: svc, cls: "k-fault", status: "parked", where: table("parked_events"),
        title: t("k.parked", { version: d.aggregate_version, consumer: d.consumer }), sub: t("k.parked.sub", { waiting: d.waiting_for_version }) });
      return s;
    case "unparked":
      Object.assign(s, { lane: svc, cls: "k-recovery", status: "applied", where: table("parked_events"),
        title: t("k.unparked", { version: d.aggregate_version }), sub: d.event_type || "" });
      return s;
    case "gap.detected":
      Object.assign(s, { lane: "inventory", cls: "k-fault", status: "open", where: "inventory service · event_gaps",
        title: t("k.gap.detected", { type: d.event_type, received: d.received_version, expected: d.expected_version }),
        sub: t("k.gap.detected.sub") });
      return s;
    case "gap.resolved":
      Object.assign(s, { lane: "inventory", cls: "k-recovery", status: "resolved", where: "inventory service · event_gaps",
        title: t("k.gap.resolved"), sub: t("k.gap.resolved.sub", { resolution: d.resolution }) });
      return s;
  }
  // A kind this page does not know yet: still shown, as a plain box.
  Object.assign(s, { lane: LANES.includes(svc) ? svc : "order", cls: "k-other", title: e.kind, sub: JSON.stringify(d).slice(0, 80), where: svc });
  return s;
}

function fmtRel(ms) {
  if (!isFinite(ms)) return "";
  const sign = ms < 0 ? "−" : "+";
  const a = Math.abs(ms);
  if (a < 1000) return sign + a.toFixed(1) + " ms";
  if (a < 60000) return sign + (a / 1000).toFixed(2) + " s";
  return sign + (a / 60000).toFixed(1) + " min";
}

function esc(s) {
  return String(s === undefined || s === null ? "" : s)
    .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

let measureCtx = null;

// fit cuts text to width pixels in the given font, with an ellipsis.
function fit(text, width, font) {
  text = String(text || "");
  if (!measureCtx) measureCtx = document.createElement("canvas").getContext("2d");
  measureCtx.font = font;
  if (measureCtx.measureText(text).width <= width) return text;
  let lo = 0, hi = text.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (measureCtx.measureText(text.slice(0, mid) + "…").width <= width) lo = mid; else hi = mid - 1;
  }
  return text.slice(0, lo) + "…";
}

const FONT_TITLE = "600 14px system-ui, sans-serif";
const FONT_SUB = "12px ui-monospace, monospace";
const FONT_NOTE = "italic 12px system-ui, sans-serif";

// renderDiagram draws steps into an SVG of the given width. selected is the
// index of the highlighted step (-1 for none).
function renderDiagram(steps, width, selected) {
  const W = Math.max(width, 960);
  const timeCol = 84;
  const laneArea = W - timeCol - 8;
  const laneW = laneArea / LANES.length;
  const laneX = (lane) => timeCol + laneW * (LANES.indexOf(lane) + 0.5);
  const headH = 58;
  const rowH = 52, noteH = 16;
  let y = headH + 6;
  const out = [];
  const rows = [];
  steps.forEach((s, i) => {
    const h = rowH + (s.note ? noteH : 0);
    rows.push({ s: s, i: i, y: y, h: h });
    y += h;
  });
  const H = y + 12;

  out.push(`<svg xmlns="http://www.w3.org/2000/svg" class="seq" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img">`);
  out.push(`<defs><marker id="ah" viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" markerWidth="13" markerHeight="13" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="ahead"/></marker></defs>`);
  // Row stripes, then lifelines, so boxes and arrows sit on top.
  rows.forEach((r) => {
    out.push(`<rect class="stripe${r.i % 2 ? " odd" : ""}${r.i === selected ? " sel" : ""}" x="0" y="${r.y}" width="${W}" height="${r.h}"/>`);
  });
  LANES.forEach((lane) => {
    const x = laneX(lane);
    out.push(`<line class="lifeline" x1="${x}" y1="${headH}" x2="${x}" y2="${H - 6}"/>`);
    out.push(`<rect class="lanehead lane-${lane}" x="${x - laneW / 2 + 6}" y="6" width="${laneW - 12}" height="${headH - 12}" rx="8"/>`);
    out.push(`<text class="lanename" x="${x}" y="27" text-anchor="middle">${esc(t("lane." + lane))}</text>`);
    out.push(`<text class="lanesub" x="${x}" y="44" text-anchor="middle">${esc(t("lane." + lane + ".sub"))}</text>`);
  });
  out.push(`<text class="timehead" x="8" y="27">${esc(t("timeline.time.1"))}</text>`);
  out.push(`<text class="timehead" x="8" y="42">${esc(t("timeline.time.2"))}</text>`);
  // Each row holds one step, so a box or a label may be wider than its
  // lane: it has the row to itself.
  const wide = laneW * 1.9;
  const place = (center, w) => {
    const left = Math.min(Math.max(center - w / 2, timeCol + 2), W - 4 - w);
    return { left: left, mid: left + w / 2 };
  };

  rows.forEach((r) => {
    const s = r.s;
    const top = r.y;
    const attrs = `class="step ${esc(s.cls)}" data-i="${r.i}" data-kind="${esc(s.kind)}" data-service="${esc(s.service)}" data-status="${esc(s.status)}"` +
      (s.resent ? ' data-resent="true"' : "") + (s.dropped ? ' data-dropped="true"' : "");
    out.push(`<g ${attrs}>`);
    out.push(`<title>${esc(s.title + "\n" + s.sub + (s.note ? "\n" + s.note : "") + "\n" + t("timeline.stored") + ": " + s.where)}</title>`);
    out.push(`<rect class="hit" x="0" y="${top}" width="${W}" height="${r.h}"/>`);
    out.push(`<text class="reltime" x="8" y="${top + 30}">${esc((s.kind === "inbox.duplicate" ? "≈" : "") + fmtRel(s.ms))}</text>`);
    if (s.to) {
      const x1 = laneX(s.lane), x2 = laneX(s.to);
      const ly = top + 27;
      const span = Math.max(Math.abs(x2 - x1) - 12, wide);
      const mid = place((x1 + x2) / 2, span).mid;
      out.push(`<line class="arrow" x1="${x1}" y1="${ly}" x2="${x2 + (x2 > x1 ? -4 : 4)}" y2="${ly}" marker-end="url(#ah)"/>`);
      out.push(`<circle class="dot" cx="${x1}" cy="${ly}" r="3.5"/>`);
      out.push(`<text class="atitle" x="${mid}" y="${ly - 7}" text-anchor="middle">${esc(fit(s.title, span, FONT_TITLE))}</text>`);
      out.push(`<text class="asub" x="${mid}" y="${ly + 17}" text-anchor="middle">${esc(fit(s.sub, span, FONT_SUB))}</text>`);
      if (s.note) out.push(`<text class="note" x="${mid}" y="${ly + 32}" text-anchor="middle">${esc(fit(s.note, span, FONT_NOTE))}</text>`);
    } else {
      const bw = wide;
      const pos = place(laneX(s.lane), bw);
      const x = pos.mid;
      out.push(`<rect class="box" x="${pos.left}" y="${top + 5}" width="${bw}" height="${rowH - 10}" rx="7"/>`);
      out.push(`<text class="btitle" x="${x}" y="${top + (s.sub ? 23 : 31)}" text-anchor="middle">${esc(fit(s.title, bw - 12, FONT_TITLE))}</text>`);
      out.push(`<text class="bsub" x="${x}" y="${top + 39}" text-anchor="middle">${esc(fit(s.sub, bw - 12, FONT_SUB))}</text>`);
      if (s.note) out.push(`<text class="note" x="${x}" y="${top + rowH + 8}" text-anchor="middle">${esc(fit(s.note, bw, FONT_NOTE))}</text>`);
    }
    out.push("</g>");
  });
  out.push("</svg>");
  return out.join("");
}
