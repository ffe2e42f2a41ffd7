// The order's traces, drawn from Jaeger's query API (internal/viewer/traces.go):
// every span on one time axis, indented under its parent, coloured by
// service; a dashed line for each link (a consumer's span to the create span
// of its message, a batch's transaction to the messages it held), followed
// across services and traces. docs/tracing.md says what each span is.
"use strict";

const TRACE_TEXT = {
  en: {
    title: "Trace",
    off: "Tracing is off. Start the stack with scripts/up.sh -d --tracing (or docker compose) to see each order as a trace.",
    none: "No trace of this order yet: spans reach Jaeger within a few seconds.",
    jaeger: "open in Jaeger",
    linked: "linked traces (a batch transaction the order's messages took part in)",
    hint: "Bars: spans on one time axis, indented under their parent. Dashed lines: links, from a message's create span to each span that processed or sent it.",
    spans: "{n} spans in {traces} trace(s); the first lasts {ms} ms, from its first span to its last",
  },
  zh: {
    title: "链路追踪",
    off: "未开启追踪。用 scripts/up.sh -d --tracing（或 docker compose）启动，即可把每个订单看成一条链路。",
    none: "此订单还没有链路：span 几秒内送达 Jaeger。",
    jaeger: "在 Jaeger 中打开",
    linked: "被链接的链路（订单消息所在的批量事务）",
    hint: "横条：同一时间轴上的 span，缩进在父 span 之下。虚线：链接，从消息的 create span 指向发送、处理它的 span。",
    spans: "{n} 个 span，{traces} 条链路；第一条从首个 span 到最后一个共 {ms} 毫秒",
  },
};

function tt(key, vars) {
  let s = (TRACE_TEXT[LANG] || TRACE_TEXT.en)[key] || TRACE_TEXT.en[key] || key;
  if (vars) s = s.replace(/\{(\w+)\}/g, (m, k) => String(vars[k]));
  return s;
}

const trace = { order: null, timer: null, polls: 0, data: null };
const SVG = "http://www.w3.org/2000/svg";
const ROW = 18, LABEL = 400, WIDTH = 1120, TAIL = 130;
const COLORS = { order: "#4c78a8", inventory: "#f58518", "payment-fake": "#54a24b", psp: "#b279a2" };

function svgEl(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// showTrace is called when an order is picked (app.js, selectOrder).
function showTrace(id) {
  trace.order = String(id);
  trace.polls = 0;
  trace.data = null;
  if (trace.timer) clearTimeout(trace.timer);
  loadTrace();
}

// loadTrace polls for a minute: spans keep arriving while the saga runs
// and each service sends its spans in batches.
async function loadTrace() {
  const id = trace.order;
  const res = await api("GET", "/api/orders/" + encodeURIComponent(id) + "/trace");
  if (id !== trace.order) return;
  const key = JSON.stringify(res.data);
  if (key !== trace.key) {
    trace.key = key;
    drawTrace(res);
  }
  trace.polls++;
  if (res.status === 200 && trace.polls < 20) trace.timer = setTimeout(loadTrace, 3000);
}

// order puts the spans in tree order: each after its parent, siblings by
// start time; spans of linked traces last.
function treeOrder(spans) {
  const byId = new Map(spans.map((s) => [s.trace_id + "/" + s.span_id, s]));
  const kids = new Map();
  const roots = [];
  for (const s of spans) {
    const p = s.parent_id && byId.get(s.trace_id + "/" + s.parent_id);
    if (p) {
      const k = p.trace_id + "/" + p.span_id;
      if (!kids.has(k)) kids.set(k, []);
      kids.get(k).push(s);
    } else {
      roots.push(s);
    }
  }
  const out = [];
  const walk = (s, depth) => {
    out.push({ span: s, depth: depth });
    for (const c of kids.get(s.trace_id + "/" + s.span_id) || []) walk(c, depth + 1);
  };
  roots.sort((a, b) => (a.linked - b.linked) || (a.start_us - b.start_us));
  for (const r of roots) walk(r, 0);
  return out;
}

function drawTrace(res) {
  let box = document.getElementById("trace");
  if (!box) return;
  box.replaceChildren();
  const head = document.createElement("h3");
  head.textContent = tt("title");
  box.append(head);
  const note = (text, cls) => {
    const p = document.createElement("p");
    p.className = cls || "hint";
    p.textContent = text;
    box.append(p);
  };
  if (res.status === 404 && res.data && /tracing is off/.test(res.data.detail || "")) return note(tt("off"));
  if (res.status !== 200) return note((res.data && (res.data.detail || res.data.error)) || String(res.status), "error");
  const v = res.data;
  if (!v.spans.length) return note(tt("none"));
  const own = v.spans.filter((s) => !s.linked);
  const first = v.traces[0] ? own.filter((s) => s.trace_id === v.traces[0]) : own;
  const t0 = Math.min(...first.map((s) => s.start_us));
  const ownEnd = Math.max(...first.map((s) => s.start_us + s.duration_us));
  const meta = document.createElement("p");
  meta.className = "meta";
  meta.textContent = tt("spans", { n: v.spans.length, traces: v.traces.length, ms: ((ownEnd - t0) / 1000).toFixed(1) }) + " ";
  if (v.jaeger_ui) {
    for (const tid of v.traces) {
      const a = document.createElement("a");
      a.href = v.jaeger_ui + "/trace/" + tid;
      a.target = "_blank";
      a.rel = "noopener";
      a.textContent = tt("jaeger") + " " + tid.slice(0, 8);
      meta.append(" ", a);
    }
  }
  box.append(meta);
  note(tt("hint"));

  // One drawing per trace of the order (its POST, a cancel, a sweep), each
  // on its own time axis, with the traces its spans link to under it.
  const drawn = new Set();
  for (const tid of v.traces) {
    const mine = v.spans.filter((s) => s.trace_id === tid);
    const linkedIds = new Set(mine.flatMap((s) => (s.links || []).map((l) => l.trace_id)).filter((id) => id !== tid && !drawn.has(id)));
    linkedIds.forEach((id) => drawn.add(id));
    const linked = v.spans.filter((s) => s.linked && linkedIds.has(s.trace_id));
    box.append(drawGroup(mine, linked, v.jaeger_ui, tid));
  }
}

// drawGroup draws one trace and the linked spans under it.
function drawGroup(mine, linked, ui, tid) {
  const spans = mine.concat(linked);
  const rows = treeOrder(spans);
  const t0 = Math.min(...spans.map((s) => s.start_us));
  const t1 = Math.max(...spans.map((s) => s.start_us + s.duration_us));
  const x = (us) => LABEL + ((us - t0) / Math.max(1, t1 - t0)) * (WIDTH - LABEL - TAIL);
  const svg = svgEl("svg", { class: "trace-svg", width: WIDTH, height: (rows.length + 2) * ROW, viewBox: `0 0 ${WIDTH} ${(rows.length + 2) * ROW}` });
  svg.append(svgEl("title", {}, "trace " + tid));
  const where = new Map(); // span -> its row's y and bar
  rows.forEach((r, i) => where.set(r.span.trace_id + "/" + r.span.span_id, { y: (i + 1) * ROW, span: r.span }));
  // The axis: milliseconds from the trace's first span.
  for (let k = 0; k <= 4; k++) {
    const us = t0 + ((t1 - t0) * k) / 4;
    svg.append(svgEl("line", { x1: x(us), x2: x(us), y1: 4, y2: (rows.length + 1) * ROW, class: "trace-grid" }));
    svg.append(svgEl("text", { x: x(us) + 2, y: 12, class: "trace-axis" }, ((us - t0) / 1000).toFixed(0) + " ms"));
  }
  svg.append(svgEl("text", { x: 4, y: 12, class: "trace-axis" }, "trace " + tid.slice(0, 16)));
  let linkedDrawn = false;
  rows.forEach((r, i) => {
    const s = r.span, y = (i + 1) * ROW;
    if (s.linked && !linkedDrawn) {
      linkedDrawn = true;
      svg.append(svgEl("line", { x1: 0, x2: WIDTH, y1: y, y2: y, class: "trace-grid" }));
    }
    const g = svgEl("g", { class: "trace-row" + (s.error ? " err" : "") + (s.linked ? " linked" : "") });
    const label = (s.linked ? "⤷ " : "") + (s.service || "?") + " · " + s.name;
    const indent = Math.min(r.depth, 12) * 8, room = Math.floor((LABEL - 8 - indent) / 6.6);
    g.append(svgEl("text", { x: 4 + indent, y: y + 13, class: "trace-label" }, label.length > room ? label.slice(0, room - 1) + "…" : label));
    const bx = x(s.start_us), bw = Math.max(2, x(s.start_us + s.duration_us) - bx);
    g.append(svgEl("rect", { x: bx, y: y + 3, width: bw, height: ROW - 6, rx: 2, fill: COLORS[s.service] || "#888", class: "trace-bar" }));
    const tail = [s.outcome, (s.duration_us / 1000).toFixed(1) + " ms"].filter(Boolean).join(" · ");
    g.append(svgEl("text", { x: bx + bw + 4, y: y + 13, class: "trace-tail" }, tail));
    g.append(svgEl("title", {}, [label, s.kind, s.operation && "messaging " + s.operation, s.message_id && "message " + s.message_id,
      s.outcome && "outcome " + s.outcome, s.linked && tt("linked"), "trace " + s.trace_id, "span " + s.span_id].filter(Boolean).join("\n")));
    svg.append(g);
  });
  // Links: from the linked span to the span that links to it.
  for (const r of rows) {
    for (const l of r.span.links || []) {
      const from = where.get(l.trace_id + "/" + l.span_id), to = where.get(r.span.trace_id + "/" + r.span.span_id);
      if (!from || !to) continue;
      const x1 = x(from.span.start_us + from.span.duration_us), y1 = from.y + ROW / 2;
      const x2 = x(r.span.start_us), y2 = to.y + ROW / 2;
      svg.append(svgEl("path", { d: `M${x1},${y1} C${x1 + 30},${y1} ${x2 - 30},${y2} ${x2},${y2}`, class: "trace-link" }));
    }
  }
  return svg;
}
