// The viewer page: orders and their timeline, the failure lab, the demo
// switches and the stack's health. Everything it shows comes from the
// viewer's /api, which passes the services' answers through; it polls
// (the services do not push, so the viewer would have to poll them anyway),
// and only what is on screen.
"use strict";

const state = {
  tab: "saga",
  tokenAsk: null,
  stock: [],
  orders: [],
  selected: null, // order id shown in the timeline
  story: null,
  storyError: null,
  steps: [],
  picked: -1, // step shown in the detail panel
  settledPolls: 0,
  storyTimer: null,
  lastCreate: null, // {key, body} of the last create, for "send again"
  experiments: [],
  run: null, // the lab run on screen
  runSteps: [],
  runTimer: null,
  switches: null,
  health: null,
};

// --- the API ------------------------------------------------------------

// api calls the viewer's API. It answers {status, data, headers}; data is
// the JSON body (a problem document for errors, as the services answer:
// type, title, status, detail). The page's token travels in the HttpOnly
// cookie the viewer set when the page was opened with ?token=; the script
// never sees it. On 401 the page asks for the token (askToken).
async function api(method, path, opts) {
  opts = opts || {};
  const headers = Object.assign({}, opts.headers || {});
  let body;
  if (opts.body !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(opts.body);
  }
  let resp;
  try {
    resp = await fetch(path, { method: method, headers: headers, body: body, cache: "no-store" });
  } catch (err) {
    return { status: 0, data: { error: t("err.network", { error: err.message }) }, headers: new Headers() };
  }
  if (resp.status === 401) askToken();
  let data = null;
  const text = await resp.text();
  if (text) {
    try { data = JSON.parse(text); } catch (e) { data = { error: text }; }
  }
  return { status: resp.status, data: data, headers: resp.headers };
}

// askToken shows where the token is (the URL scripts/up.sh printed) and
// takes it pasted: the page then reopens itself with ?token=, which the
// viewer trades for its cookie.
function askToken() {
  if (state.tokenAsk) return;
  state.tokenAsk = true;
  const dlg = document.getElementById("token-dialog");
  document.getElementById("token-form").onsubmit = (ev) => {
    ev.preventDefault();
    const v = document.getElementById("token-input").value.trim();
    if (v) location.assign("/?token=" + encodeURIComponent(v));
  };
  dlg.showModal();
}

// --- small helpers --------------------------------------------------------

function $(sel, root) { return (root || document).querySelector(sel); }

function el(tag, attrs, children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of [].concat(children || [])) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// pill shows a state as stored; compact (lists) leaves the gloss to the tooltip.
function pill(status, compact) {
  const label = statusLabel(status);
  return el("span", { class: "pill s-" + status, dataset: { status: status }, title: label, text: compact ? status : label });
}

function randomKey(prefix) {
  const a = new Uint8Array(6);
  crypto.getRandomValues(a);
  return prefix + "-" + Array.from(a, (b) => b.toString(16).padStart(2, "0")).join("");
}

function age(iso) {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 90) return t("age.s", { n: Math.round(s) });
  if (s < 5400) return t("age.m", { n: Math.round(s / 60) });
  return t("age.h", { n: Math.round(s / 3600) });
}

function errorBox(res) {
  const msg = res.data || {};
  return el("div", { class: "error" }, [
    el("span", { text: t("orders.failed", { code: res.status }) + " " }),
    el("code", { text: JSON.stringify(msg) }),
  ]);
}

// every runs f now and then every ms, while the page is open.
function every(ms, f) {
  const tick = async () => {
    try { await f(); } finally { setTimeout(tick, ms); }
  };
  tick();
}

// --- tabs and language ----------------------------------------------------

function showTab(name) {
  state.tab = name;
  document.querySelectorAll(".tab").forEach((b) => b.setAttribute("aria-selected", String(b.dataset.tab === name)));
  document.querySelectorAll(".panel").forEach((p) => { p.hidden = p.id !== "panel-" + name; });
  if (name === "switches") refreshSwitches();
  if (name === "saga" && state.story) renderTimeline();
}

function rerender() {
  applyI18n(document);
  renderHealth();
  renderStockOptions();
  renderCreateResult();
  renderOrders();
  renderTimeline();
  renderExperiments();
  renderRun();
  renderSwitches();
}

// --- health -----------------------------------------------------------------

async function refreshHealth() {
  const res = await api("GET", "/api/health");
  if (res.status === 200) {
    state.health = res.data;
    renderHealth();
  }
}

function renderHealth() {
  const box = $("#health");
  const h = state.health;
  if (!h) return;
  box.replaceChildren();
  for (const svc of ["order", "inventory", "payment"]) {
    const s = h.services[svc] || {};
    const ob = (s.outbox && s.outbox.by_status) || {};
    const oldest = s.outbox ? s.outbox.oldest_pending_age_seconds : null;
    const warn = (n) => (n > 0 ? "bad" : "");
    box.append(el("div", { class: "hcard" + (s.up ? "" : " down"), dataset: { service: svc, up: String(!!s.up) }, title: s.ready || "" }, [
      el("div", { class: "hname" }, [el("span", { class: "dot " + (s.up ? "up" : "down") }), t("lane." + svc),
        el("span", { class: "hstate", text: s.up ? t("health.up") : t("health.down") })]),
      el("div", { class: "hline" }, [
        t("health.outbox") + ": ",
        el("b", { text: ob.pending !== undefined ? ob.pending : t("health.unknown") }), " " + t("health.pending") + " · ",
        el("b", { text: ob.sending !== undefined ? ob.sending : t("health.unknown") }), " " + t("health.sending") + " · ",
        el("b", { class: warn(ob.failed), text: ob.failed !== undefined ? ob.failed : t("health.unknown") }), " " + t("health.failed"),
      ]),
      el("div", { class: "hline" }, [
        t("health.oldest") + " ", el("b", { class: oldest > 5 ? "bad" : "", text: oldest !== null && oldest !== undefined ? oldest.toFixed(1) + "s" : "?" }),
        " · " + t("health.dead") + " ", el("b", { class: warn(s.dead_letters), text: s.dead_letters }),
        " · " + t("health.parked") + " ", el("b", { class: warn(s.parked_overdue), text: s.parked }),
      ]),
    ]));
  }
  const oo = h.open_orders || {};
  const cnt = (n, cap) => (n < 0 ? "?" : n >= cap ? n + "+" : String(n));
  box.append(el("div", { class: "hcard wide" }, [
    el("div", { class: "hname", text: t("health.orders") }),
    el("div", { class: "hline" }, [pill("pending_inventory"), " ", el("b", { text: cnt(oo.pending_inventory, 500) }), "  ",
      pill("awaiting_payment"), " ", el("b", { text: cnt(oo.awaiting_payment, 500) })]),
    el("div", { class: "hline" }, [t("health.gaps") + " ", el("b", { class: h.open_gaps > 0 ? "bad" : "", text: cnt(h.open_gaps, 1000) }),
      " · " + t("health.attention") + " ", el("b", { class: h.needs_attention > 0 ? "bad" : "", text: h.needs_attention })]),
  ]));
}

// --- orders -----------------------------------------------------------------

async function loadStock() {
  const res = await api("GET", "/api/stock");
  if (res.status === 200) {
    state.stock = res.data.stock || [];
    renderStockOptions();
  }
}

function renderStockOptions() {
  document.querySelectorAll("select.sku").forEach((sel) => {
    const cur = sel.value || sel.dataset.want || "SKU-1";
    sel.replaceChildren();
    for (const s of state.stock) {
      sel.append(el("option", { value: s.sku, text: s.sku + " (" + t("orders.available", { n: s.available }) + ")" }));
    }
    if (state.stock.some((s) => s.sku === cur)) sel.value = cur;
  });
}

function addLine(sku, qty) {
  const line = el("div", { class: "line" }, [
    el("select", { class: "sku", "aria-label": t("orders.sku"), dataset: { want: sku || "SKU-1" } }),
    el("input", { class: "qty", type: "number", min: "1", max: "1000", value: String(qty || 1), "aria-label": t("orders.qty") }),
    el("button", { type: "button", class: "icon", title: t("orders.removeLine"), text: "×",
      onclick: (ev) => { if (document.querySelectorAll("#lines .line").length > 1) ev.target.closest(".line").remove(); } }),
  ]);
  $("#lines").append(line);
  renderStockOptions();
}

function formBody() {
  const items = [];
  document.querySelectorAll("#lines .line").forEach((l) => {
    items.push({ sku: $("select.sku", l).value, quantity: Number($("input.qty", l).value) });
  });
  return { customer_id: $("#customer").value, items: items };
}

async function createOrder(key, body) {
  const out = $("#create-result");
  out.replaceChildren();
  const res = await api("POST", "/api/orders", { body: body, headers: { "Idempotency-Key": key } });
  out.replaceChildren();
  if (res.status !== 202) {
    out.append(errorBox(res));
    return;
  }
  const o = res.data;
  state.lastCreate = { key: key, body: body, id: o.order_id, code: res.status, status: o.status,
    replayed: res.headers.get("Idempotent-Replayed") === "true" };
  renderCreateResult();
  $("#idem-key").value = randomKey("web");
  await refreshOrders();
  selectOrder(o.order_id);
}

function renderCreateResult() {
  const c = state.lastCreate;
  const out = $("#create-result");
  if (!c || out.querySelector(".error")) return;
  out.replaceChildren(
    el("div", { class: c.replayed ? "ok replayed" : "ok", dataset: { orderId: c.id, replayed: String(c.replayed), key: c.key } }, [
      c.replayed ? t("orders.replayed", { key: c.key, id: c.id })
        : t("orders.accepted", { id: c.id, code: c.code, key: c.key, status: c.status }),
    ]),
    el("button", { type: "button", id: "send-again", class: "secondary", text: t("orders.sendAgain", { key: c.key }),
      onclick: () => createOrder(c.key, c.body) }));
}

async function refreshOrders() {
  const res = await api("GET", "/api/orders?limit=25");
  if (res.status !== 200) return;
  const orders = res.data.orders || [];
  const key = JSON.stringify(orders);
  if (key === state.ordersKey) {
    // Unchanged: only the ages move (rebuilding the rows could eat a click).
    document.querySelectorAll("#orders-body tr").forEach((tr, i) => {
      if (orders[i]) tr.querySelector("td.age").textContent = age(orders[i].created_at);
    });
    return;
  }
  state.ordersKey = key;
  state.orders = orders;
  renderOrders();
}

function renderOrders() {
  const body = $("#orders-body");
  body.replaceChildren();
  $("#orders-empty").hidden = state.orders.length > 0;
  for (const o of state.orders) {
    body.append(el("tr", { class: o.order_id === state.selected ? "sel" : "", dataset: { orderId: o.order_id },
      onclick: () => selectOrder(o.order_id) }, [
      el("td", { class: "num", text: "#" + o.order_id }),
      el("td", {}, [pill(o.status, true)]),
      el("td", { class: "num", text: money(o.total_cents, o.currency) }),
      el("td", { class: "num age", text: age(o.created_at) }),
      el("td", { class: "cust", text: o.customer_id }),
    ]));
  }
}

// --- the timeline -----------------------------------------------------------

function selectOrder(id) {
  id = String(id);
  if (state.selected !== id) {
    state.selected = id;
    state.story = null;
    state.storyError = null;
    state.storyKey = null;
    state.steps = [];
    state.picked = -1;
  }
  state.settledPolls = 0;
  renderOrders();
  renderTimeline();
  if (state.storyTimer) clearTimeout(state.storyTimer);
  pollStory();
}

async function pollStory() {
  const id = state.selected;
  if (!id) return;
  const res = await api("GET", "/api/orders/" + encodeURIComponent(id) + "/story");
  if (id !== state.selected) return; // another order was picked meanwhile
  const key = res.status + JSON.stringify(res.data);
  const changed = key !== state.storyKey;
  state.storyKey = key;
  if (res.status === 200) {
    state.story = res.data;
    state.storyError = null;
  } else {
    state.story = null;
    state.storyError = res;
  }
  const wasLive = state.settledPolls < 3;
  state.settledPolls = settled() ? state.settledPolls + 1 : 0;
  // Redraw only what changed: a redraw under the pointer loses hovers and clicks.
  if (changed || wasLive !== (state.settledPolls < 3)) renderTimeline();
  // Live while the order is open; a few polls after it settles catch the
  // last inbox rows (a consumer may commit after the producer marked sent).
  if (state.settledPolls < 3) state.storyTimer = setTimeout(pollStory, 1000);
}

function settled() {
  const st = state.story;
  if (!st) return true;
  const o = st.order;
  if (o && !["confirmed", "rejected", "cancelled"].includes(o.status)) return false;
  if (o && o.refund_status === "pending") return false;
  for (const svc of ["order", "inventory", "payment"]) {
    for (const row of (st.outbox && st.outbox[svc]) || []) {
      if (row.status === "pending" || row.status === "sending") return false;
    }
  }
  return true;
}

function renderTimeline() {
  const head = $("#timeline-head");
  const box = $("#diagram");
  const extra = $("#timeline-extra");
  head.replaceChildren();
  extra.replaceChildren();
  if (!state.selected) {
    box.replaceChildren(el("p", { class: "hint", text: t("timeline.pick") }));
    $("#detail").hidden = true;
    return;
  }
  const live = state.settledPolls < 3;
  const st = state.story;
  const o = st && st.order;
  head.append(el("h2", { text: t("timeline.title", { id: state.selected }) }));
  if (o) {
    head.append(pill(o.status));
    head.append(el("span", { class: "meta", text: t("timeline.total", { amount: money(o.total_cents, o.currency) }) }));
    head.append(el("span", { class: "meta", text: t("timeline.customer", { id: o.customer_id }) }));
    if (o.refund_status && o.refund_status !== "none") head.append(el("span", { class: "meta", text: t("timeline.refund", { status: o.refund_status }) }));
    if (o.status_reason) head.append(el("span", { class: "meta reason", text: t("timeline.reason", { reason: o.status_reason }) }));
    head.append(el("button", { type: "button", id: "cancel-order", class: "secondary", text: t("orders.cancel"), onclick: () => cancelOrder(o.order_id) }));
  }
  head.append(el("span", { class: "live " + (live ? "on" : "off"), id: "live", text: live ? t("timeline.live") : t("timeline.settled") }));

  if (state.storyError) {
    box.replaceChildren(errorBox(state.storyError));
    return;
  }
  if (!st) {
    box.replaceChildren(el("p", { class: "hint", text: t("timeline.loading") }));
    return;
  }
  if (!o) extra.append(el("p", { class: "error", id: "no-order", text: t("timeline.missing", { id: st.order_id }) }));
  if (st.warnings && st.warnings.length) {
    extra.append(el("div", { class: "warnings" }, [t("timeline.warnings"), el("ul", {}, st.warnings.map((w) => el("li", { text: w })))]));
  }
  state.steps = buildSteps(st);
  const last = state.steps.length ? state.steps[state.steps.length - 1].ms : 0;
  extra.append(el("p", { class: "meta", id: "step-count", text: t("timeline.steps", { n: state.steps.length, ms: fmtRel(last) }) }));
  const width = Math.floor(box.clientWidth || 1000);
  box.innerHTML = renderDiagram(state.steps, width, state.picked);
  renderDetail();
}

function pickStep(i) {
  state.picked = i;
  document.querySelectorAll("#diagram .stripe").forEach((r, j) => r.classList.toggle("sel", j === i));
  renderDetail();
}

function renderDetail() {
  const panel = $("#detail");
  const s = state.steps[state.picked];
  panel.hidden = false;
  const body = $("#detail-body");
  body.replaceChildren();
  if (!s) {
    body.append(el("p", { class: "hint", text: t("timeline.detail.hint") }));
    return;
  }
  body.append(el("p", {}, [el("b", { text: s.title }), " · " + fmtRel(s.ms) + " · " + s.at]));
  body.append(el("p", {}, [t("timeline.stored") + ": ", el("code", { text: s.where })]));
  if (s.note) body.append(el("p", { class: "note", text: s.note }));
  body.append(el("pre", { text: JSON.stringify(s.record, null, 2) }));
}

async function cancelOrder(id) {
  const res = await api("POST", "/api/orders/" + encodeURIComponent(id) + "/cancel", { headers: { "Idempotency-Key": randomKey("web-cancel") } });
  const out = $("#create-result");
  out.replaceChildren();
  state.lastCreate = null;
  if (res.status === 200 || res.status === 202) {
    out.append(el("div", { class: "ok", text: t("orders.cancelled", { id: id, result: res.data.result }) }));
  } else {
    out.append(errorBox(res));
  }
  selectOrder(id);
  refreshOrders();
}

// --- the lab ----------------------------------------------------------------

async function loadExperiments() {
  const res = await api("GET", "/api/lab/experiments");
  if (res.status === 200) {
    state.experiments = res.data.experiments || [];
    renderExperiments();
  }
  const runs = await api("GET", "/api/lab/runs");
  if (runs.status === 200 && runs.data.runs.length && !state.run) {
    followRun(runs.data.runs[0].id); // pick up the latest run after a reload
  }
}

function expText(x) {
  const zh = LANG === "zh" && ZH_EXPERIMENTS[x.name];
  return zh ? { title: zh.title, window: zh.window, holds: zh.holds } : { title: x.title, window: x.window, holds: x.holds };
}

function renderExperiments() {
  const list = $("#experiments");
  list.replaceChildren();
  const busy = state.run && state.run.state === "running";
  for (const x of state.experiments) {
    const txt = expText(x);
    list.append(el("li", { class: "exp" + (state.run && state.run.experiment === x.name ? " current" : ""), dataset: { experiment: x.name } }, [
      el("div", { class: "exphead" }, [el("code", { text: x.name }), el("span", { class: "exptitle", text: txt.title })]),
      el("div", { class: "expline" }, [el("span", { class: "label", text: t("lab.window") + ": " }), txt.window]),
      el("div", { class: "expline" }, [el("span", { class: "label", text: t("lab.holds") + ": " }), txt.holds]),
      el("div", { class: "expbuttons" }, [
        el("button", { type: "button", class: "run", disabled: busy, text: t("lab.run"), onclick: () => startRun(x.name, false) }),
        x.wrong_way ? el("button", { type: "button", class: "run wrong secondary", disabled: busy, title: t("lab.wrongSwitch", { switch: x.wrong_way }),
          text: t("lab.runWrong"), onclick: () => startRun(x.name, true) }) : null,
        x.wrong_way ? el("code", { class: "switchname", text: x.wrong_way }) : null,
      ]),
    ]));
  }
}

async function startRun(name, wrong) {
  const res = await api("POST", "/api/lab/runs", { body: { experiment: name, wrong_way: wrong } });
  const msg = $("#lab-message");
  msg.replaceChildren();
  if (res.status !== 202) {
    msg.append(errorBox(res));
    return;
  }
  state.run = res.data;
  state.runSteps = [];
  followRun(res.data.id);
}

function followRun(id) {
  if (state.runTimer) clearTimeout(state.runTimer);
  state.runSteps = [];
  const poll = async () => {
    const res = await api("GET", "/api/lab/runs/" + id + "?after=" + state.runSteps.length);
    if (res.status === 200) {
      const moved = res.data.steps.length > 0 || !state.run || state.run.id !== res.data.id || state.run.state !== res.data.state;
      state.runSteps = state.runSteps.concat(res.data.steps);
      state.run = res.data;
      if (moved) {
        renderRun();
        renderExperiments();
      } else if ($("#run-state")) {
        $("#run-state").textContent = t("lab.running", { s: res.data.seconds.toFixed(1) });
      }
    }
    if (!state.run || state.run.state === "running") state.runTimer = setTimeout(poll, 400);
  };
  poll();
}

// Symbols the common system fonts have (no emoji font is assumed).
const STEP_ICON = {
  started: "▶", "wrong-way": "⚠", armed: "⚡", order: "◆", hit: "⚑", paused: "‖", released: "▷", disarmed: "✓",
  "crash-ready": "⚙", restarted: "☠", published: "✉", cancel: "✗", waiting: "…", waited: "✓", section: "▤", check: "•", verdict: "⚖",
  binding: "⇄", operator: "☛",
};

function stepText(s) {
  // On a stack of several instances, the lab says which ones it set.
  const on = s.instances && s.instances.length ? " [" + s.instances.join(", ") + "]" : "";
  const v = { service: s.service ? t("lane." + s.service) + on : "", point: s.point, what: s.what, id: s.order_id,
    type: s.event_type, event: shortID(s.event_id), s: (s.seconds || 0).toFixed(2) };
  switch (s.kind) {
    case "started": return t("step.started", { what: state.run ? expTitle(state.run.experiment) : s.what });
    case "wrong-way": return s.switches && s.switches.length ? t("step.wrong-way", Object.assign(v, { switches: s.switches.join(", ") })) : t("step.wrong-way.off", v);
    case "armed": return t("step.armed", Object.assign(v, { action: t("sw.fp.action." + s.action), count: s.count ? t("step.armed.count", { n: s.count }) : "" }));
    case "order": return s.what ? t("step.order.expected", v) : t("step.order", v);
    case "section": return t("step.section", { title: s.section.title });
    case "check": return t("step.check", { what: s.check.what });
    case "published": return s.what ? t("step.published.as", v) : t("step.published", v);
    default: return t("step." + s.kind, v);
  }
}

function expTitle(name) {
  const x = state.experiments.find((e) => e.name === name);
  return x ? expText(x).title : name;
}

function renderRun() {
  const box = $("#run");
  box.replaceChildren();
  const r = state.run;
  if (!r) {
    box.append(el("p", { class: "hint", text: t("lab.pick") }));
    return;
  }
  const done = r.state !== "running";
  box.append(el("div", { class: "runhead", dataset: { state: r.state, experiment: r.experiment } }, [
    el("h2", {}, [el("code", { text: r.experiment }), " " + expTitle(r.experiment)]),
    r.wrong_way ? el("span", { class: "badge wrong", text: t("lab.wrongSwitch", { switch: r.wrong_way }) }) : null,
    el("span", { class: "badge " + r.state, id: "run-state", text: done ? (r.passed ? t("lab.passed") : t("lab.failed")) + " " + t("lab.took", { s: r.seconds.toFixed(1) })
      : t("lab.running", { s: r.seconds.toFixed(1) }) }),
  ]));
  if (done && r.report) {
    const zh = LANG === "zh" && ZH_EXPERIMENTS[r.experiment];
    const gist = zh && r.passed ? (r.wrong_way ? zh.wrong : zh.held) : null;
    box.append(el("div", { class: "verdict " + (r.passed ? "passed" : "failed"), id: "verdict", dataset: { passed: String(r.passed) } }, [
      el("h3", { text: t("lab.verdict") + ": " + (r.passed ? t("lab.passed") : t("lab.failed")) }),
      gist ? el("p", { class: "gist", text: gist }) : null,
      gist ? el("p", { class: "original" }, [el("span", { class: "label", text: t("lab.original") + " " }), r.report.verdict]) : el("p", { class: "gist", text: r.report.verdict }),
    ]));
  }
  if (r.order_id) {
    box.append(el("button", { type: "button", id: "open-order", class: "secondary", text: t("lab.openOrder", { id: r.order_id }),
      onclick: () => { showTab("saga"); selectOrder(r.order_id); } }));
  }
  // Steps and checks side by side, as they happen.
  const stepsList = el("ol", { class: "steps", id: "steps" });
  const checksList = el("ul", { class: "checks", id: "checks" });
  const waits = {};
  state.runSteps.forEach((s, i) => { if (s.kind === "waited") waits[s.what] = i; });
  state.runSteps.forEach((s, i) => {
    if (s.kind === "check") {
      checksList.append(el("li", { class: s.check.ok ? "ok" : "fail", dataset: { ok: String(s.check.ok) } }, [
        el("span", { class: "mark", text: s.check.ok ? "✓" : "✗" }), el("b", { text: s.check.what }), ": " + s.check.detail]));
      return;
    }
    if (s.kind === "verdict" || s.kind === "section") return;
    // A wait that ended shows once, as its end.
    if (s.kind === "waiting" && waits[s.what] > i) return;
    const pending = s.kind === "waiting" && !done;
    stepsList.append(el("li", { class: "step k-" + s.kind + (pending ? " pending" : ""), dataset: { kind: s.kind } }, [
      el("span", { class: "icon", text: STEP_ICON[s.kind] || "•" }),
      el("span", { class: "when", text: "+" + ((Date.parse(s.at) - Date.parse(r.started_at)) / 1000).toFixed(2) + "s" }),
      el("span", { class: "what", text: stepText(s) }),
    ]));
  });
  box.append(el("div", { class: "runcols" }, [
    el("section", {}, [el("h3", { text: t("lab.steps") }), stepsList]),
    el("section", {}, [el("h3", { text: t("lab.checks") }), checksList]),
  ]));
  const sections = state.runSteps.filter((s) => s.kind === "section");
  if (sections.length) {
    const ev = el("section", { class: "evidence", id: "evidence" }, [el("h3", { text: t("lab.evidence") })]);
    for (const s of sections) ev.append(renderSection(s.section));
    box.append(ev);
  }
}

function renderSection(sec) {
  const d = el("details", { open: true, class: "section" }, [el("summary", { text: sec.title })]);
  const grid = el("div", { class: "tables" });
  for (const tb of sec.tables || []) {
    const table = el("table", { class: "data" }, [
      el("caption", { text: tb.title }),
      el("thead", {}, [el("tr", {}, (tb.header || []).map((h) => el("th", { text: h })))]),
      el("tbody", {}, (tb.rows && tb.rows.length ? tb.rows : [[t("lab.noRows")]]).map((row) =>
        el("tr", {}, row.map((c) => el("td", { text: c, class: /^(sending|failed|FAIL)/.test(c) ? "bad" : "" }))))),
    ]);
    grid.append(table);
  }
  d.append(grid);
  return d;
}

// --- switches ---------------------------------------------------------------

async function refreshSwitches() {
  const res = await api("GET", "/api/switches");
  if (res.status !== 200) return;
  const key = JSON.stringify(res.data);
  if (key === state.switchesKey) return; // keep what the reader is choosing
  state.switchesKey = key;
  state.switches = res.data;
  renderSwitches();
}

const PSP_MODES = ["normal", "slow", "lose-response", "fail-before-charge", "error-5xx", "decline"];

function renderSwitches() {
  const sw = state.switches;
  if (!sw) return;
  // PSP: the form keeps what the reader typed; only the state line changes.
  const cur = $("#psp-current");
  if (sw.psp && sw.psp.error) {
    cur.textContent = t("sw.unavailable", { error: sw.psp.error });
  } else if (sw.psp) {
    cur.replaceChildren(el("span", { dataset: { mode: sw.psp.mode }, id: "psp-mode", text: t("sw.now", { mode: sw.psp.mode }) }),
      sw.psp.count ? " · " + t("sw.left", { n: sw.psp.count }) : "", " — " + t("sw.mode." + sw.psp.mode));
  }
  const modeSel = $("#psp-mode-select");
  const keep = modeSel.value;
  modeSel.replaceChildren();
  for (const m of PSP_MODES) modeSel.append(el("option", { value: m, text: m + " — " + t("sw.mode." + m) }));
  if (keep) modeSel.value = keep;

  const ww = $("#wrongway");
  ww.replaceChildren();
  const fps = $("#failpoints");
  fps.replaceChildren();
  for (const svc of ["order", "inventory", "payment"]) {
    const w = sw.wrong_way[svc] || {};
    const card = el("div", { class: "swcard", dataset: { service: svc } }, [el("h4", { text: t("lane." + svc) })]);
    if (w.error) {
      card.append(el("p", { class: "error", text: t("sw.unavailable", { error: w.error }) }));
    } else {
      const on = new Set(w.on || []);
      const names = Object.keys(w.known || {}).sort();
      for (const name of names) {
        const desc = LANG === "zh" && ZH_WRONG_WAYS[name] ? ZH_WRONG_WAYS[name] : w.known[name];
        card.append(el("label", { class: "check" + (on.has(name) ? " on" : "") }, [
          el("input", { type: "checkbox", value: name, checked: on.has(name) }),
          el("code", { text: name }), el("span", { class: "desc", text: desc })]));
      }
      card.append(el("button", { type: "button", class: "secondary", text: t("sw.apply"), onclick: () => applyWrongWay(svc, card) }));
    }
    ww.append(card);

    const f = sw.failpoints[svc] || {};
    const fcard = el("div", { class: "swcard", dataset: { service: svc } }, [el("h4", { text: t("lane." + svc) })]);
    if (f.error) {
      fcard.append(el("p", { class: "error", text: t("sw.unavailable", { error: f.error }) }));
    } else {
      const armed = f.armed || [];
      if (!armed.length) fcard.append(el("p", { class: "hint", text: t("sw.fp.none") }));
      for (const a of armed) {
        fcard.append(el("div", { class: "armed", dataset: { point: a.name } }, [
          el("code", { text: a.name }),
          el("span", { class: "meta", text: t("sw.fp.action." + a.action) + " · " + (a.remaining < 0 ? t("sw.fp.every") : t("sw.fp.left", { n: a.remaining })) +
            " · " + t("sw.fp.hits", { n: a.hits }) + (a.paused ? " · " + t("sw.fp.paused", { n: a.paused }) : "") }),
          a.action === "pause" ? el("button", { type: "button", class: "small", text: t("sw.fp.release"),
            onclick: () => fpCall("POST", svc, a.name, "/release") }) : null,
          el("button", { type: "button", class: "small secondary", text: t("sw.fp.disarm"), onclick: () => fpCall("DELETE", svc, a.name, "") }),
        ]));
      }
      const pointSel = el("select", { class: "fp-point", "aria-label": t("sw.fp.point") },
        (f.known || []).map((p) => el("option", { value: p.name, title: LANG === "zh" && ZH_FAILPOINTS[p.name] ? ZH_FAILPOINTS[p.name] : p.description, text: p.name })));
      const actionSel = el("select", { class: "fp-action", "aria-label": t("sw.fp.action") },
        ["error", "pause", "crash"].map((a) => el("option", { value: a, text: t("sw.fp.action." + a) })));
      const count = el("input", { class: "fp-count", type: "number", min: "0", value: "1", "aria-label": t("sw.count") });
      fcard.append(el("div", { class: "armform" }, [pointSel, actionSel, count,
        el("button", { type: "button", text: t("sw.fp.arm"), onclick: () => fpCall("PUT", svc, pointSel.value, "", { action: actionSel.value, count: Number(count.value) }) }),
        el("button", { type: "button", class: "secondary", text: t("sw.fp.disarmAll"), onclick: () => fpCall("DELETE", svc, "", "") }),
      ]));
    }
    fps.append(fcard);
  }
}

async function switchResult(res, what) {
  const msg = $("#switch-message");
  msg.replaceChildren();
  if (res.status >= 200 && res.status < 300) {
    msg.append(el("div", { class: "ok", text: t("sw.done", { what: what }) }));
  } else {
    msg.append(errorBox(res));
  }
  await refreshSwitches();
}

async function setPSP(ev) {
  ev.preventDefault();
  const body = { mode: $("#psp-mode-select").value, delay_ms: Number($("#psp-delay").value), count: Number($("#psp-count").value) };
  const res = await api("PUT", "/api/psp/switches", { body: body });
  switchResult(res, "PSP " + body.mode);
}

async function applyWrongWay(svc, card) {
  const on = Array.from(card.querySelectorAll("input[type=checkbox]:checked"), (c) => c.value);
  const res = await api("PUT", "/api/wrong-way/" + svc, { body: { on: on } });
  switchResult(res, svc + " wrong-way");
}

async function fpCall(method, svc, name, suffix, body) {
  const path = "/api/failpoints/" + svc + (name ? "/" + encodeURIComponent(name) : "") + suffix;
  const res = await api(method, path, body ? { body: body } : {});
  switchResult(res, svc + " " + (name || "failpoints") + " " + method.toLowerCase() + suffix);
}

// --- start ------------------------------------------------------------------

function init() {
  LANG = pickLanguage();
  document.documentElement.lang = LANG === "zh" ? "zh-CN" : "en";
  applyI18n(document);
  document.querySelectorAll(".tab").forEach((b) => b.addEventListener("click", () => showTab(b.dataset.tab)));
  $("#lang-toggle").addEventListener("click", () => { setLanguage(LANG === "zh" ? "en" : "zh"); rerender(); });
  $("#add-line").addEventListener("click", () => addLine());
  $("#new-key").addEventListener("click", () => { $("#idem-key").value = randomKey("web"); });
  $("#create-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    createOrder($("#idem-key").value, formBody());
  });
  $("#psp-form").addEventListener("submit", setPSP);
  $("#idem-key").value = randomKey("web");
  addLine("SKU-1", 1);
  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { if (state.tab === "saga") renderTimeline(); }, 150);
  });
  $("#diagram").addEventListener("click", (ev) => {
    const g = ev.target.closest("g.step");
    if (g) pickStep(Number(g.dataset.i));
  });
  renderTimeline();
  renderRun();
  loadStock();
  loadExperiments();
  every(2000, refreshOrders);
  every(3000, refreshHealth);
  every(3000, async () => { if (state.tab === "switches") await refreshSwitches(); });
  document.body.dataset.ready = "true";
}

document.addEventListener("DOMContentLoaded", init);
