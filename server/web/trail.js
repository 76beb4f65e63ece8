// trail.js: what the task's trail (GET /api/trail, the durable record the
// server keeps after stages and tasks end) adds to the page: a step's LLM
// calls — the prompt and the raw answer, folded — and tool calls in its
// details, also for steps of finished stages; and the task's timeline.

import { h, fill, clock, json, ms, tokens } from "./dom.js";
import { store, api, nameOf } from "./store.js";

const enc = encodeURIComponent;

// records caches each step's trail: step_id → {key, loading, entries, step, error}.
// key is the step's state when it was read: a step that changed is read again.
const records = new Map();

// opened remembers which folds the user opened (they survive re-renders).
const opened = new Set();

/** trailStep is a step known only from the trail (its stage ended before the page saw it). */
export function trailStep(id) {
  const r = records.get(id);
  return r ? r.step : null;
}

/** loadStep reads a step's trail once per state; rerender is called when it arrives. */
export function loadStep(taskId, stepId, key, rerender) {
  const have = records.get(stepId);
  if (have && (have.key === key || have.loading)) return have;
  const r = { key, loading: true, entries: have ? have.entries : null, step: have ? have.step : null, error: "" };
  records.set(stepId, r);
  api(`/api/trail?task_id=${enc(taskId)}&step=${enc(stepId)}&limit=500`, { quiet401: true })
    .then((d) => {
      r.entries = d.entries || [];
      const ended = r.entries.filter((e) => e.step).pop();
      if (ended) r.step = ended.step;
    })
    .catch((err) => (r.error = err.message))
    .finally(() => {
      r.loading = false;
      rerender();
    });
  return r;
}

function fold(key, title, text) {
  const d = h("details", { class: "fold", open: opened.has(key) }, h("summary", { text: title }), h("pre", { text }));
  d.addEventListener("toggle", () => (d.open ? opened.add(key) : opened.delete(key)));
  return d;
}

/** stepTrail is the trail section of a step's details. */
export function stepTrail(taskId, s, rerender) {
  const r = loadStep(taskId, s.step_id, `${s.execution_state}/${s.finished_at || ""}`, rerender);
  if (!r.entries) return h("p", { class: "muted small", text: r.error ? `trail: ${r.error}` : "Reading the trail…" });
  const calls = r.entries.filter((e) => e.kind === "llm_call" || e.kind === "tool_call");
  if (calls.length === 0) return h("p", { class: "muted small", text: "The trail holds no LLM or tool call of this step." });
  return h(
    "div",
    { class: "trail", "data-step-id": s.step_id },
    calls.map((e, i) => {
      const key = `${s.step_id}/${i}`; // the server shows no seq (trail_cursors.go)
      if (e.kind === "llm_call") {
        const l = e.llm;
        const head = `LLM call${l.round > 1 ? " (repair round)" : ""} · ${l.model || "default model"} · ${tokens(l.prompt_tokens)} + ${tokens(l.completion_tokens)} tok` +
          (l.cached_tokens ? ` (${tokens(l.cached_tokens)} cached)` : "") + ` · ${ms(l.latency_ms)}`;
        const prompt = (l.request || []).map((m) => `── ${m.role} ──\n${m.content.text}`).join("\n\n");
        return h(
          "section",
          { class: "block trail-call", "data-kind": "llm_call", "data-index": i },
          h("h3", { text: head }),
          fold(`${key}/prompt`, `prompt (${(l.request || []).length} messages, ${prompt.length} characters)`, prompt),
          fold(`${key}/answer`, `raw answer (${(l.answer.text || "").length} characters)`, l.answer.text || ""),
          l.parse_error ? h("p", { class: "error", text: `parse error: ${l.parse_error}` }) : null,
          l.error ? h("p", { class: "error", text: `call failed: ${l.error}` }) : null,
        );
      }
      const t = e.tool;
      return h(
        "section",
        { class: "block trail-call", "data-kind": "tool_call", "data-index": i },
        h("h3", { text: `${t.op} ${t.server}${t.name ? "." + t.name : ""} · ${ms(t.duration_ms)}${t.is_error ? " · reported an error" : ""}` }),
        fold(`${key}/args`, "arguments", t.arguments.text || "{}"),
        fold(`${key}/result`, `result (${(t.result.text || "").length} characters)`, t.result.text || ""),
        t.approval ? h("p", { class: "small", text: `approval: ${json(t.approval)}` }) : null,
        t.error ? h("p", { class: "error", text: t.error }) : null,
      );
    }),
  );
}

// --- the task timeline

const timeline = { task: "", entries: null, loading: false, error: "" };

/** loadTimeline reads the selected task's whole trail, bodies cut short. */
export async function loadTimeline(taskId, rerender) {
  Object.assign(timeline, { task: taskId, loading: true, error: "" });
  rerender();
  const out = [];
  try {
    let cursor = "";
    do {
      const d = await api(`/api/trail?task_id=${enc(taskId)}&brief=1&limit=500${cursor ? "&cursor=" + enc(cursor) : ""}`);
      out.push(...(d.entries || []));
      cursor = d.next_cursor || "";
    } while (cursor && timeline.task === taskId);
    if (timeline.task === taskId) timeline.entries = out;
  } catch (err) {
    timeline.error = err.message;
  } finally {
    timeline.loading = false;
    rerender();
  }
}

const ICONS = { llm_call: "🧠", tool_call: "🔧", message: "💬", instruction: "📋", operator_action: "🧑", step: "✔" };

function what(e) {
  switch (e.kind) {
    case "llm_call":
      return `${e.skill}${e.llm.round > 1 ? " (repair)" : ""}: ${e.llm.error || e.llm.parse_error || e.llm.answer.text}`;
    case "tool_call":
      return `${e.tool.op} ${e.tool.server}${e.tool.name ? "." + e.tool.name : ""}${e.tool.error ? ": " + e.tool.error : ""}`;
    case "message":
    case "instruction":
      return `→ ${(e.message.receiver || []).map(nameOf).join(", ")}: ${e.message.text.text}`;
    case "operator_action":
      return `${e.action.action}: ${e.action.input.text}${e.action.error ? " — " + e.action.error : ""}`;
    case "step":
      return `${e.skill} ${e.step ? e.step.execution_state : ""}: ${e.step ? e.step.step_intention : ""}`;
  }
  return e.kind;
}

/** renderTimeline shows the selected task's trail, oldest first. */
export function renderTimeline(el, selectStep, rerender) {
  const taskId = store.selectedTask;
  const load = h("button", { type: "button", class: "ghost small", text: timeline.loading ? "Reading…" : "Load", disabled: !taskId || timeline.loading, onclick: () => loadTimeline(taskId, rerender) });
  if (timeline.task !== taskId || !timeline.entries) {
    fill(el, h("p", { class: "empty" }, timeline.error ? `trail: ${timeline.error} ` : "The task's whole record, also of ended stages. ", load));
    return;
  }
  fill(
    el,
    h("p", { class: "muted small" }, `${timeline.entries.length} entries `, load),
    h(
      "ol",
      { class: "timeline" },
      timeline.entries.map((e) =>
        h(
          "li",
          {
            class: `tl tl-${e.kind}` + (e.step_id && e.step_id === store.selectedStep ? " selected" : ""),
            "data-kind": e.kind,
            "data-step-id": e.step_id || "",
            title: e.step_id ? "show the step's details" : "",
            onclick: e.step_id ? () => selectStep(e.step_id) : null,
          },
          h("span", { class: "muted small", text: clock(e.time) }),
          h("span", { class: "icon", text: ICONS[e.kind] || "·" }),
          h("b", { text: e.agent_id ? nameOf(e.agent_id) : "" }),
          h("span", { class: "intent", text: what(e) }),
        ),
      ),
    ),
  );
}

