// The step-through of an order's timeline: buttons and a slider move
// through the diagram's steps; the steps after the current one fade, and
// the panel above the diagram shows every table the order touches and the
// saga's queues as they were after that step (asof.js rebuilds them). The
// position is part of the address (#/orders/ID/steps/N), so a teacher can
// send "look at step 7". At the last step the timeline follows the order
// live.
"use strict";

const stepper = {
  at: null, // index of the current step; null: the last one, following the order
  frames: null, // replaySteps of the steps on screen
  framesOf: null, // the storyKey they were built from
};

// stepAt is the index of the current step.
function stepAt() {
  const n = state.steps.length;
  if (!n) return -1;
  return stepper.at === null ? n - 1 : Math.min(stepper.at, n - 1);
}

// renderStepper draws the bar and the tables for the steps on screen. It
// is called after each redraw of the diagram.
function renderStepper() {
  const bar = $("#stepper");
  const panel = $("#asof");
  if (!state.story || !state.steps.length) {
    bar.hidden = true;
    panel.hidden = true;
    return;
  }
  if (stepper.framesOf !== state.storyKey || !stepper.frames || stepper.frames.frames.length !== state.steps.length) {
    stepper.frames = replaySteps(state.steps, state.story);
    stepper.framesOf = state.storyKey;
  }
  bar.hidden = false;
  panel.hidden = false;
  const slider = $("#step-slider");
  slider.max = String(state.steps.length);
  showStep();
}

// setStep moves to step i (clamped); the last step means "now". The
// address follows, without a new history entry per step.
function setStep(i) {
  const n = state.steps.length;
  if (!n) return;
  i = Math.max(0, Math.min(n - 1, i));
  stepper.at = i === n - 1 ? null : i;
  state.picked = i;
  showStep();
  renderDetail();
  const want = orderAddress(state.selected, stepper.at);
  if (location.hash !== want) history.replaceState(null, "", want);
}

// showStep reflects the current step in the bar, the diagram and the panel.
function showStep() {
  const i = stepAt();
  const n = state.steps.length;
  const s = state.steps[i];
  if (!s) return;
  const slider = $("#step-slider");
  slider.value = String(i + 1);
  const label = t("stepper.at", { i: i + 1, n: n, ms: fmtRel(s.ms), title: s.title }) + (i === n - 1 ? " " + t("stepper.now") : "");
  slider.setAttribute("aria-valuetext", label);
  $("#step-label").textContent = label;
  $("#stepper").dataset.step = String(i + 1);
  $("#step-first").disabled = i === 0;
  $("#step-prev").disabled = i === 0;
  $("#step-next").disabled = i === n - 1;
  $("#step-last").disabled = i === n - 1;
  document.querySelectorAll("#diagram g.step").forEach((g) => {
    const j = Number(g.dataset.i);
    g.classList.toggle("future", j > i);
    g.classList.toggle("current", j === i);
  });
  document.querySelectorAll("#diagram .stripe").forEach((r, j) => r.classList.toggle("sel", j === i));
  renderAsOf(stepper.frames.frames[i], stepper.frames.involved);
}

// renderAsOf draws the tables after one step: the queues, then a column
// per service database; the rows that step changed are marked.
function renderAsOf(frame, involved) {
  const body = $("#asof-body");
  body.replaceChildren();
  if (!frame) return;
  body.append(queueStrip(frame.queues));
  const grid = el("div", { class: "asofgrid" });
  for (const col of ASOF_LAYOUT) {
    const box = el("div", { class: "asofcol" });
    for (const db of col) {
      box.append(el("h4", { class: "lane-" + db.lane }, [t("lane." + db.lane), el("span", { class: "sub", text: t("lane." + db.lane + ".sub") })]));
      for (const name of db.tables) {
        const key = db.lane + "/" + name;
        if (involved.has(key)) box.append(rowTable(name, key, frame.tables[key] || []));
      }
    }
    grid.append(box);
  }
  body.append(grid);
}

// breakable lets a long column name wrap after its underscores.
function breakable(name) {
  return String(name).replace(/_/g, "_\u200b");
}

function rowTable(name, key, rows) {
  const cols = ASOF_COLUMNS[name];
  return el("table", { class: "data asof-table", dataset: { table: key, rows: String(rows.length) } }, [
    el("caption", {}, [el("code", { text: name })]),
    el("thead", {}, [el("tr", {}, cols.map((c) => el("th", { title: c, text: breakable(c) })))]),
    el("tbody", {}, rows.length ? rows.map((r) => el("tr", { class: r.changed ? "changed" : "", dataset: { status: r.cells.status || "" } },
      cols.map((c) => cellOf(name, c, r.cells)))) : [el("tr", {}, [el("td", { class: "none", colspan: String(cols.length), text: t("asof.none") })])]),
  ]);
}

function cellOf(table, col, cells) {
  const v = cells[col];
  if (col === "event_id") {
    // An inbox row names only the event: its type is shown beside it.
    const type = table === "consumer_inbox" && cells.event_type ? " " + cells.event_type : "";
    // A correction's row names the event it corrects (corrects_event_id).
    const corrects = cells.corrects_event_id ? " " + t("asof.corrects", { event: shortID(cells.corrects_event_id) }) : "";
    return el("td", { title: v, text: shortID(v) + type + corrects });
  }
  if (col === "applied_at") return el("td", { text: v ? fmtClock(v) : "—" });
  const text = v === undefined || v === null ? "" : String(v);
  if (col === "status" || col === "to_status") return el("td", { class: "st s-" + v, text: text });
  return el("td", { text: text });
}

// queueStrip shows each saga queue with the order's messages waiting in it.
function queueStrip(queues) {
  return el("div", { class: "queues", dataset: { table: "rabbit/queues" } }, [
    el("span", { class: "qtitle" }, [el("b", { text: "RabbitMQ" }), " " + t("asof.queues")]),
    ...queues.map((q) => el("span", { class: "qchip" + (q.changed ? " changed" : "") + (q.depth ? " waiting" : ""),
      dataset: { queue: q.queue, depth: String(q.depth) }, title: t("asof.consumer", { consumer: q.consumer }) }, [
      el("code", { text: q.queue }),
      el("b", { class: "depth", text: String(q.depth) }),
      q.depth ? el("span", { class: "msgs", text: q.messages.join(", ") }) : null,
    ])),
  ]);
}

function fmtClock(iso) {
  const d = new Date(iso);
  return isNaN(d) ? String(iso) : d.toISOString().slice(11, 23);
}

// Keys on the bar and the diagram: arrows step, Home and End jump. The
// slider has its own arrows.
function stepKeys(ev) {
  if (ev.target && ev.target.id === "step-slider") return;
  const i = stepAt();
  const to = { ArrowLeft: i - 1, ArrowRight: i + 1, Home: 0, End: state.steps.length - 1 }[ev.key];
  if (to === undefined) return;
  ev.preventDefault();
  setStep(to);
}

function initStepper() {
  $("#step-first").addEventListener("click", () => setStep(0));
  $("#step-prev").addEventListener("click", () => setStep(stepAt() - 1));
  $("#step-next").addEventListener("click", () => setStep(stepAt() + 1));
  $("#step-last").addEventListener("click", () => setStep(state.steps.length - 1));
  $("#step-slider").addEventListener("input", (ev) => setStep(Number(ev.target.value) - 1));
  $("#stepper").addEventListener("keydown", stepKeys);
  $("#diagram").addEventListener("keydown", stepKeys);
}
