// The failure lab on the page: the experiments, one run as it happens
// (#/lab/runs/ID), a right-way run and its wrong-way run side by side with
// the invariant the wrong way broke (#/lab/compare/R/W), and the recent
// runs with their addresses. Runs live in the viewer (GET /api/lab/runs):
// the page only follows them, so a reload or another reader's browser
// shows the same run.
"use strict";

async function loadExperiments() {
  const res = await api("GET", "/api/lab/experiments");
  if (res.status === 200) {
    state.experiments = res.data.experiments || [];
    renderExperiments();
  }
  await refreshRunsList();
  // No run named by the address: the latest one is on the lab tab.
  const latest = state.runsList[0];
  if (latest && !state.run && !state.compare) {
    followRun(latest.id);
    if (state.tab === "lab" && parseAddress(location.hash).run === undefined && !parseAddress(location.hash).compare) {
      history.replaceState(null, "", runAddress(latest.id));
    }
  }
}

function expText(x) {
  const zh = LANG === "zh" && ZH_EXPERIMENTS[x.name];
  return zh ? { title: zh.title, window: zh.window, holds: zh.holds } : { title: x.title, window: x.window, holds: x.holds };
}

// labBusy: a run (or the second of a pair) is still to finish.
function labBusy() {
  return state.runsList.some((r) => r.state === "running" || r.state === "queued") ||
    (state.run && state.run.state === "running");
}

function renderExperiments() {
  const list = $("#experiments");
  list.replaceChildren();
  const busy = labBusy();
  const current = state.compare ? (state.compare.runs[state.compare.ids[0]] || {}).experiment : state.run && state.run.experiment;
  for (const x of state.experiments) {
    const txt = expText(x);
    list.append(el("li", { class: "exp" + (current === x.name ? " current" : ""), dataset: { experiment: x.name } }, [
      el("div", { class: "exphead" }, [el("code", { text: x.name }), el("span", { class: "exptitle", text: txt.title })]),
      el("div", { class: "expline" }, [el("span", { class: "label", text: t("lab.window") + ": " }), txt.window]),
      el("div", { class: "expline" }, [el("span", { class: "label", text: t("lab.holds") + ": " }), txt.holds]),
      el("div", { class: "expbuttons" }, [
        el("button", { type: "button", class: "run", disabled: busy, text: t("lab.run"), onclick: () => startRun(x.name, {}) }),
        x.wrong_way ? el("button", { type: "button", class: "run wrong secondary", disabled: busy, title: t("lab.wrongSwitch", { switch: x.wrong_way }),
          text: t("lab.runWrong"), onclick: () => startRun(x.name, { wrong_way: true }) }) : null,
        x.wrong_way ? el("button", { type: "button", class: "run both secondary", disabled: busy, title: t("lab.sideBySide.title"),
          text: t("lab.sideBySide"), onclick: () => startRun(x.name, { side_by_side: true }) }) : null,
        x.wrong_way ? el("code", { class: "switchname", text: x.wrong_way }) : null,
      ]),
    ]));
  }
}

async function startRun(name, how) {
  const res = await api("POST", "/api/lab/runs", { body: Object.assign({ experiment: name }, how) });
  const msg = $("#lab-message");
  msg.replaceChildren();
  if (res.status !== 202) {
    msg.append(errorBox(res));
    return;
  }
  await refreshRunsList();
  go(res.data.pair ? compareAddress(res.data.id, res.data.pair) : runAddress(res.data.id));
}

// followRun puts one run on screen and polls it until it is over.
function followRun(id) {
  const gen = ++state.runGen;
  if (state.runTimer) clearTimeout(state.runTimer);
  state.compare = null;
  state.run = null;
  state.runSteps = [];
  state.runMissing = null;
  const poll = async () => {
    const res = await api("GET", "/api/lab/runs/" + id + "?after=" + state.runSteps.length);
    if (gen !== state.runGen) return; // another run was put on screen meanwhile
    if (res.status === 404) {
      state.runMissing = id;
      renderRun();
      return;
    }
    if (res.status === 200) {
      const moved = res.data.steps.length > 0 || !state.run || state.run.state !== res.data.state;
      // Over, and the list does not say so yet: the buttons wait for it.
      const listed = state.runsList.find((r) => r.id === res.data.id);
      const ended = res.data.state !== "running" && res.data.state !== "queued" && listed && listed.state !== res.data.state;
      state.runSteps = state.runSteps.concat(res.data.steps);
      state.run = res.data;
      if (moved) {
        renderRun();
        renderExperiments();
      } else if ($("#run-state")) {
        $("#run-state").textContent = t("lab.running", { s: res.data.seconds.toFixed(1) });
      }
      if (ended) refreshRunsList();
    }
    if (!state.run || state.run.state === "running" || state.run.state === "queued") state.runTimer = setTimeout(poll, 400);
  };
  renderRun();
  poll();
}

// followCompare puts a pair on screen: the right way's run and the wrong
// way's, polled until both are over.
function followCompare(right, wrong) {
  const gen = ++state.runGen;
  if (state.runTimer) clearTimeout(state.runTimer);
  state.run = null;
  state.runMissing = null;
  const c = { ids: [right, wrong], runs: {}, steps: { [right]: [], [wrong]: [] } };
  state.compare = c;
  const over = (r) => r && r.state !== "running" && r.state !== "queued";
  const poll = async () => {
    let moved = false;
    for (const id of c.ids) {
      if (over(c.runs[id])) continue;
      const res = await api("GET", "/api/lab/runs/" + id + "?after=" + c.steps[id].length);
      if (gen !== state.runGen) return;
      if (res.status === 404) {
        state.runMissing = id;
        renderRun();
        return;
      }
      if (res.status !== 200) continue;
      const old = c.runs[id];
      moved = moved || res.data.steps.length > 0 || !old || old.state !== res.data.state;
      c.steps[id] = c.steps[id].concat(res.data.steps);
      c.runs[id] = res.data;
    }
    if (moved) {
      renderRun();
      renderExperiments();
    }
    if (c.ids.every((id) => over(c.runs[id]))) refreshRunsList();
    else state.runTimer = setTimeout(poll, 400);
  };
  renderRun();
  poll();
}

// --- the recent runs, with their addresses -----------------------------------

async function refreshRunsList() {
  const res = await api("GET", "/api/lab/runs");
  if (res.status !== 200) return;
  const runs = res.data.runs || [];
  // Redraw only what changed: a redraw under the pointer loses clicks.
  const key = JSON.stringify(runs.map((r) => [r.id, r.state, r.pair]));
  if (key === state.runsKey) return;
  state.runsKey = key;
  state.runsList = runs;
  renderRunsList();
  renderExperiments();
}

function renderRunsList() {
  const list = $("#runs-list");
  list.replaceChildren();
  $("#runs-empty").hidden = state.runsList.length > 0;
  const byID = {};
  for (const r of state.runsList) byID[r.id] = r;
  for (const r of state.runsList) {
    // A pair is listed once, under its right way's run.
    if (r.pair && r.wrong_way && byID[r.pair]) continue;
    const pair = r.pair ? byID[r.pair] : null;
    const state_ = (x) => (x.state === "passed" ? t("lab.passed") : x.state === "failed" ? t("lab.failed") : x.state === "queued" ? t("lab.queued") : t("lab.runningShort"));
    const text = pair ? t("lab.runs.pair", { id: r.id, pair: pair.id, exp: r.experiment, right: state_(r), wrong: state_(pair) })
      : t("lab.runs.one", { id: r.id, exp: r.experiment, way: r.wrong_way ? " · " + t("lab.wrongSwitch", { switch: r.wrong_way }) : "", state: state_(r) });
    list.append(el("li", { dataset: { run: String(r.id) } }, [
      el("a", { href: pair ? compareAddress(r.id, pair.id) : runAddress(r.id), text: text }),
    ]));
  }
}

// --- one run ----------------------------------------------------------------

// Symbols the common system fonts have (no emoji font is assumed).
const STEP_ICON = {
  started: "▶", "wrong-way": "⚠", armed: "⚡", order: "◆", hit: "⚑", paused: "‖", released: "▷", disarmed: "✓",
  "crash-ready": "⚙", restarted: "☠", published: "✉", cancel: "✗", waiting: "…", waited: "✓", section: "▤", check: "•", verdict: "⚖",
  binding: "⇄", operator: "☛",
};

function stepText(s, experiment) {
  // On a stack of several instances, the lab says which ones it set.
  const on = s.instances && s.instances.length ? " [" + s.instances.join(", ") + "]" : "";
  const v = { service: s.service ? t("lane." + s.service) + on : "", point: s.point, what: s.what, id: s.order_id,
    type: s.event_type, event: shortID(s.event_id), s: (s.seconds || 0).toFixed(2) };
  switch (s.kind) {
    case "started": return t("step.started", { what: experiment ? expTitle(experiment) : s.what });
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

function runBadge(r, id) {
  const done = r.state !== "running" && r.state !== "queued";
  const text = r.state === "queued" ? t("lab.queued")
    : done ? (r.passed ? t("lab.passed") : t("lab.failed")) + " " + t("lab.took", { s: r.seconds.toFixed(1) })
      : t("lab.running", { s: r.seconds.toFixed(1) });
  return el("span", { class: "badge " + r.state, id: id, text: text });
}

// verdictBox is the run's verdict, with the Chinese gist when there is one.
function verdictBox(r, id) {
  const zh = LANG === "zh" && ZH_EXPERIMENTS[r.experiment];
  const gist = zh && r.passed ? (r.wrong_way ? zh.wrong : zh.held) : null;
  return el("div", { class: "verdict " + (r.passed ? "passed" : "failed"), id: id, dataset: { passed: String(r.passed) } }, [
    el("h3", { text: t("lab.verdict") + ": " + (r.passed ? t("lab.passed") : t("lab.failed")) }),
    gist ? el("p", { class: "gist", text: gist }) : null,
    gist ? el("p", { class: "original" }, [el("span", { class: "label", text: t("lab.original") + " " }), r.report.verdict]) : el("p", { class: "gist", text: r.report.verdict }),
  ]);
}

// checkKind says what a check is about: "broken" for the anomaly a wrong
// way shows (the invariant it broke), "invariant" for the books the right
// way keeps (state, quantity, amount, side effects), else "".
function checkKind(c, wrong) {
  if (wrong && /^anomaly:/.test(c.what) && c.ok) return "broken";
  if (!wrong && /^(state|quantity|amount|side effects):/.test(c.what)) return "invariant";
  return "";
}

// runLists lists a run's steps and its checks as they happened.
function runLists(r, steps, ids) {
  const done = r.state !== "running" && r.state !== "queued";
  const stepsList = el("ol", { class: "steps", id: ids ? ids.steps : null });
  const checksList = el("ul", { class: "checks", id: ids ? ids.checks : null });
  const waits = {};
  steps.forEach((s, i) => { if (s.kind === "waited") waits[s.what] = i; });
  steps.forEach((s, i) => {
    if (s.kind === "check") {
      const kind = checkKind(s.check, !!r.wrong_way);
      const mark = kind === "broken" ? "✗" : s.check.ok ? "✓" : "✗";
      checksList.append(el("li", { class: (s.check.ok ? "ok" : "fail") + (kind ? " " + kind : ""), dataset: { ok: String(s.check.ok), kind: kind } }, [
        el("span", { class: "mark", text: mark }),
        kind === "broken" ? el("span", { class: "tag", text: t("lab.broken") }) : null,
        el("b", { text: s.check.what }), ": " + s.check.detail]));
      return;
    }
    if (s.kind === "verdict" || s.kind === "section") return;
    // A wait that ended shows once, as its end.
    if (s.kind === "waiting" && waits[s.what] > i) return;
    const pending = s.kind === "waiting" && !done;
    stepsList.append(el("li", { class: "step k-" + s.kind + (pending ? " pending" : ""), dataset: { kind: s.kind } }, [
      el("span", { class: "icon", text: STEP_ICON[s.kind] || "•" }),
      el("span", { class: "when", text: "+" + ((Date.parse(s.at) - Date.parse(r.started_at)) / 1000).toFixed(2) + "s" }),
      el("span", { class: "what", text: stepText(s, r.experiment) }),
    ]));
  });
  return { steps: stepsList, checks: checksList };
}

function evidence(steps, id, open) {
  const sections = steps.filter((s) => s.kind === "section");
  if (!sections.length) return null;
  const ev = el("section", { class: "evidence", id: id }, [el("h3", { text: t("lab.evidence") })]);
  for (const s of sections) ev.append(renderSection(s.section, open));
  return ev;
}

function renderRun() {
  const box = $("#run");
  box.replaceChildren();
  if (state.runMissing) {
    box.append(el("p", { class: "error", id: "run-missing", text: t("lab.missing", { id: state.runMissing }) }));
    return;
  }
  if (state.compare) {
    renderCompare(box, state.compare);
    return;
  }
  const r = state.run;
  if (!r) {
    box.append(el("p", { class: "hint", text: t("lab.pick") }));
    return;
  }
  box.append(el("div", { class: "runhead", dataset: { state: r.state, experiment: r.experiment, run: String(r.id) } }, [
    el("h2", {}, [el("code", { text: r.experiment }), " " + expTitle(r.experiment)]),
    r.wrong_way ? el("span", { class: "badge wrong", text: t("lab.wrongSwitch", { switch: r.wrong_way }) }) : null,
    runBadge(r, "run-state"),
    r.pair ? el("a", { class: "pairlink", id: "pair-link", href: r.wrong_way ? compareAddress(r.pair, r.id) : compareAddress(r.id, r.pair),
      text: t("lab.showPair") }) : null,
  ]));
  if (r.report) box.append(verdictBox(r, "verdict"));
  if (r.order_id) {
    box.append(el("button", { type: "button", id: "open-order", class: "secondary", text: t("lab.openOrder", { id: r.order_id }),
      onclick: () => go(orderAddress(r.order_id)) }));
  }
  // Steps and checks side by side, as they happen.
  const lists = runLists(r, state.runSteps, { steps: "steps", checks: "checks" });
  box.append(el("div", { class: "runcols" }, [
    el("section", {}, [el("h3", { text: t("lab.steps") }), lists.steps]),
    el("section", {}, [el("h3", { text: t("lab.checks") }), lists.checks]),
  ]));
  const ev = evidence(state.runSteps, "evidence", true);
  if (ev) box.append(ev);
}

// renderCompare draws a pair side by side: the invariant on top, held by
// the right way and broken by the wrong way; each way's verdict and checks
// (the broken ones marked), its steps and its evidence.
function renderCompare(box, c) {
  const right = c.runs[c.ids[0]];
  const wrong = c.runs[c.ids[1]];
  if (!right || !wrong) {
    box.append(el("p", { class: "hint", text: t("timeline.loading") }));
    return;
  }
  const x = state.experiments.find((e) => e.name === right.experiment) || { name: right.experiment, holds: "" };
  const done = (r) => r.state === "passed" || r.state === "failed";
  const broken = done(wrong) && wrong.passed; // the wrong way showed its anomaly
  const held = done(right) && right.passed;
  box.append(el("div", { class: "runhead comparehead", dataset: { experiment: right.experiment } }, [
    el("h2", {}, [el("code", { text: right.experiment }), " " + expTitle(right.experiment)]),
  ]));
  box.append(el("div", { class: "invariant" + (broken ? " broken" : ""), id: "invariant", dataset: { held: String(held), broken: String(broken) } }, [
    el("span", { class: "label", text: t("lab.invariant") + ": " }), el("b", { text: expText(x).holds }),
    el("span", { class: "verdicts" }, [
      el("span", { class: "held " + (held ? "yes" : "no"), text: t("lab.rightWay") + ": " + (done(right) ? (held ? t("lab.held") : t("lab.failed")) : "…") }),
      el("span", { class: "brokenmark " + (broken ? "yes" : "no"), text: t("lab.wrongWayShort") + ": " + (done(wrong) ? (broken ? t("lab.brokenWord") : t("lab.notShown")) : "…") }),
    ]),
  ]));
  const side = (r, which) => {
    const lists = runLists(r, c.steps[r.id]);
    const kids = [
      el("h3", {}, [which === "right" ? t("lab.rightWay") : t("lab.wrongWay", { switch: r.wrong_way }), " ",
        el("a", { href: runAddress(r.id), class: "runlink", text: "#" + r.id })]),
      runBadge(r, null),
      r.report ? verdictBox(r, null) : null,
      r.order_id ? el("button", { type: "button", class: "secondary open-order", text: t("lab.openOrder", { id: r.order_id }),
        onclick: () => go(orderAddress(r.order_id)) }) : null,
      el("h4", { text: t("lab.checks") }), lists.checks,
      el("details", { class: "steps-fold" }, [el("summary", { text: t("lab.steps") }), lists.steps]),
    ];
    const ev = evidence(c.steps[r.id], null, false);
    if (ev) kids.push(ev);
    return el("section", { class: "side " + which, dataset: { side: which, run: String(r.id), state: r.state } }, kids);
  };
  box.append(el("div", { class: "comparecols", id: "compare" }, [side(right, "right"), side(wrong, "wrong")]));
}

function renderSection(sec, open) {
  const d = el("details", { open: open, class: "section" }, [el("summary", { text: sec.title })]);
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
