// board.js: the task list (left), the selected task's head and its stages →
// agents → steps (center), and the selected step's details (right).

import { h, fill, morph, short, tokens, chars, ms, clock, stamp, json, stateBadge, stepIcon } from "./dom.js";
import { store, nameOf, stepsOf } from "./store.js";
import { taskControls, agentControls, interrupted } from "./controls.js";
import { stepTrail, trailStep, loadStep } from "./trail.js";

const NO_RELATIVE = "no_relative";

/** orderedTasks: the newest task first, the MAS base task last. */
export function orderedTasks() {
  return Object.values(store.tasks).sort((a, b) => {
    if (!!a.base !== !!b.base) return a.base ? 1 : -1;
    return a.created_at < b.created_at ? 1 : a.created_at > b.created_at ? -1 : 0;
  });
}

/** renderTasks fills the task list; select is called with a task_id on click. */
export function renderTasks(list, select) {
  const tasks = orderedTasks();
  if (!store.loaded) {
    fill(list, h("li", { class: "empty loading", text: "loading…" }));
    return;
  }
  if (tasks.length === 0) {
    fill(list, h("li", { class: "empty", text: "No tasks." }));
    return;
  }
  morph(list,
    ...tasks.map((t) => {
      const stages = t.stage_list || [];
      const done = stages.filter((s) => s.execution_state === "finished").length;
      const awaiting = store.inbox.filter((m) => m.awaiting_reply && m.task_id === t.task_id).length;
      return h(
        "li",
        {
          class: "task" + (t.task_id === store.selectedTask ? " selected" : "") + (t.base ? " base" : ""),
          "data-task-id": t.task_id,
          "data-state": t.execution_state,
          tabIndex: 0,
          role: "button",
          "aria-pressed": t.task_id === store.selectedTask ? "true" : "false",
          onclick: () => select(t.task_id),
          onkeydown: (e) => (e.key === "Enter" || e.key === " ") && (e.preventDefault(), select(t.task_id)),
        },
        h("div", { class: "task-line" }, h("span", { class: "task-name", text: t.task_name }), t.paused ? h("span", { class: "pill paused", text: "⏸" , title: "paused" }) : null, stateBadge(t.execution_state)),
        h(
          "div",
          { class: "task-meta" },
          t.base ? h("span", { text: "always running" }) : h("span", { text: `${done}/${stages.length} stages` }),
          h("span", { class: "tok", title: "tokens used by this task", text: `${tokens(t.usage && t.usage.total_tokens)} tok` }),
          t.budget && t.budget.held ? h("span", { class: "pill warn budget-held", title: t.budget.held, text: "budget reached" }) : null,
          awaiting ? h("span", { class: "pill warn", title: "messages awaiting your reply", text: `✉ ${awaiting}` }) : null,
        ),
      );
    }),
  );
}

/** budgetText says a task's limits and what is left of them ("" without any). */
function budgetText(t) {
  const b = t.budget || {};
  const used = (t.usage && t.usage.total_tokens) || 0;
  const parts = [];
  if (b.tokens) parts.push(`budget ${tokens(b.tokens)} tok, ${tokens(Math.max(b.tokens - used, 0))} left`);
  if (b.agent_tokens) parts.push(`${tokens(b.agent_tokens)} tok per agent`);
  if (b.cost) parts.push(`cost ${(b.cost_used || 0).toFixed(4)} of ${b.cost.toFixed(4)}`);
  return parts.join(" · ");
}

/** renderTaskHead shows the selected task: name, state, tokens, budget, team. */
export function renderTaskHead(el) {
  const t = store.tasks[store.selectedTask];
  if (!t) {
    fill(el, h("p", { class: "empty", text: "No task selected. Hand one over through MCP (add_task), or ask the manager in the MAS base task." }));
    return;
  }
  const u = t.usage || {};
  const team = (t.task_group || []).map((id) => {
    const a = store.agents[id];
    const mine = store.me && id === store.me.human_agent_id;
    return h(
      "span",
      { class: "member" + (mine ? " me" : "") + (a && a.kind === "human" ? " human" : ""), "data-agent-id": id, title: a ? `${a.role} · ${a.working_state}` : id },
      h("span", { class: `dot ws-${a ? a.working_state : "unknown"}` }),
      h("b", { text: nameOf(id) }),
      mine ? h("span", { class: "you", text: "you" }) : null,
      id === t.task_manager ? h("span", { class: "role", text: "manager" }) : null,
      a && a.kind === "llm" ? h("span", { class: "tok", text: `${tokens(a.usage && a.usage.total_tokens)} tok` }) : null,
    );
  });
  morph(el,
    h(
      "div",
      { class: "title-row" },
      h("h2", { id: "task-name", text: t.task_name }),
      stateBadge(t.execution_state, "big"),
      h("span", { id: "task-state", class: "visually-hidden", text: t.execution_state }),
      taskControls(t),
      h("span", { class: "spacer" }),
      h(
        "span",
        { class: "usage", title: `prompt ${u.prompt_tokens || 0} + completion ${u.completion_tokens || 0} tokens in ${u.calls || 0} LLM calls, ${ms(u.latency_ms)}` },
        h("b", { text: tokens(u.total_tokens) }),
        " tokens · ",
        `${u.calls || 0} calls · ${ms(u.latency_ms)}`,
      ),
      budgetText(t) ? h("span", { id: "task-budget", class: "usage", title: "the task's budget and what is left of it", text: budgetText(t) }) : null,
    ),
    t.budget && t.budget.held
      ? h("p", { id: "task-held", class: "held" }, h("b", { text: "Paused for its budget: " }), `${t.budget.held}. Answer the budget question in your inbox (approve raises it, deny ends the task), or set a new budget with manage_task set_budget.`)
      : null,
    h("p", { class: "intention", text: t.task_intention }),
    t.task_summary ? h("p", { class: "summary" }, h("b", { text: "Summary: " }), t.task_summary) : null,
    h("div", { class: "team" }, h("span", { class: "label", text: "Team" }), team),
  );
}

/** renderProgress shows the selected task's stages → agents → steps. */
export function renderProgress(el, selectStep) {
  const t = store.tasks[store.selectedTask];
  if (!t) {
    fill(el);
    return;
  }
  const steps = stepsOf((s) => s.task_id === t.task_id);
  const blocks = [];
  const outside = steps.filter((s) => s.stage_id === NO_RELATIVE || !(t.stage_list || []).some((st) => st.stage_id === s.stage_id));
  const stages = t.stage_list || [];
  const staged = stages.some((st) => st.execution_state !== "init");
  if (outside.length) {
    // Set-up steps fold away once the stages run (the user may reopen them).
    blocks.push(
      foldable(
        `${t.task_id}/${NO_RELATIVE}`,
        !t.base && staged,
        { class: "stage outside", "data-stage-id": NO_RELATIVE },
        [
          h("span", { class: "stage-no", text: "·" }),
          h("span", { class: "stage-int", text: t.base ? "Steps of the base task" : "Task set-up and management (outside stages)" }),
          h("span", { class: "muted small", text: `${outside.length} steps` }),
        ],
        agentBlocks(byAgent(outside), null, selectStep),
      ),
    );
  }
  stages.forEach((st, i) => {
    const inStage = steps.filter((s) => s.stage_id === st.stage_id);
    const agents = byAgent(inStage);
    for (const id of Object.keys(st.agent_allocation || {})) if (!agents.has(id)) agents.set(id, []);
    // A finished stage folds away while a later one runs.
    const later = stages.slice(i + 1).some((x) => x.execution_state === "running");
    blocks.push(
      foldable(
        `${t.task_id}/${st.stage_id}`,
        st.execution_state === "finished" && later,
        { class: `stage st-${st.execution_state}`, "data-stage-id": st.stage_id, "data-state": st.execution_state },
        [
          h("span", { class: "stage-no", text: `${i + 1}` }),
          h("span", { class: "stage-int", text: st.stage_intention }),
          st.retry_of ? h("span", { class: "pill", text: `retry of ${short(st.retry_of)}` }) : null,
          h("span", { class: "muted small", text: `${inStage.length} steps` }),
          stateBadge(st.execution_state),
        ],
        agentBlocks(agents, st, selectStep),
      ),
    );
  });
  if (blocks.length === 0) blocks.push(h("p", { class: "empty", text: "The manager has not staged this task yet." }));
  morph(el, ...blocks);
}

// folded remembers the blocks the user opened or closed (key → closed).
const folded = new Map();

/** foldable is a <details> block, closed by default when closedByDefault. */
function foldable(key, closedByDefault, attrs, head, body) {
  const closed = folded.has(key) ? folded.get(key) : closedByDefault;
  const d = h("details", { ...attrs, open: !closed }, h("summary", { class: "stage-head" }, head), body);
  d.querySelector("summary").addEventListener("click", () => folded.set(key, d.open)); // d.open is the state before the click
  return d;
}

function byAgent(steps) {
  const m = new Map();
  for (const s of steps) {
    if (!m.has(s.agent_id)) m.set(s.agent_id, []);
    m.get(s.agent_id).push(s);
  }
  return m;
}

function agentBlocks(agents, stage, selectStep) {
  return h(
    "div",
    { class: "agents" },
    [...agents.entries()].map(([id, steps]) => {
      const a = store.agents[id];
      const inStage = stage && stage.every_agent_state ? stage.every_agent_state[id] : "";
      const goal = stage && stage.agent_allocation ? stage.agent_allocation[id] : "";
      const summary = stage && stage.completion_summary ? stage.completion_summary[id] : "";
      const used = steps.reduce((n, s) => n + ((s.usage && s.usage.total_tokens) || 0), 0);
      return h(
        "div",
        { class: "agent", "data-agent-id": id },
        h(
          "div",
          { class: "agent-head" },
          h("span", { class: `dot ws-${a ? a.working_state : "unknown"}`, title: a ? `working state: ${a.working_state}` : "" }),
          h("b", { class: "agent-name", text: nameOf(id) }),
          a ? h("span", { class: "muted", text: a.role }) : null,
          inStage ? stateBadge(inStage) : null,
          a && (a.step_lock || []).length ? h("span", { class: "pill warn", title: "blocked until a reply arrives (step lock)", text: "⏳ waiting for a reply" }) : null,
          a && a.working_state === "paused" ? h("span", { class: "pill paused", title: "it, or every task it has steps in, is paused", text: "paused" }) : null,
          agentControls(id, a),
          h("span", { class: "spacer" }),
          h("span", { class: "tok", title: `tokens of these steps; the agent used ${a ? tokens(a.usage && a.usage.total_tokens) : "?"} in all` }, `${tokens(used)} tok`),
          a && a.kind === "llm" ? h("span", { class: "tok total", title: "the agent's total tokens (all tasks)", text: `Σ ${tokens(a.usage && a.usage.total_tokens)}` }) : null,
        ),
        goal ? h("div", { class: "goal", text: goal }) : null,
        summary ? h("div", { class: "agent-summary" }, h("b", { text: "Done: " }), summary) : null,
        steps.length
          ? h("ol", { class: "steps" }, steps.map((s) => stepRow(s, selectStep)))
          : h("div", { class: "muted small", text: "no steps yet" }),
      );
    }),
  );
}

function stepRow(s, selectStep) {
  const u = s.usage || {};
  return h(
    "li",
    {
      class: `step st-${s.execution_state}` + (s.step_id === store.selectedStep ? " selected" : "") + (s.gone ? " gone" : ""),
      "data-step-id": s.step_id,
      "data-state": s.execution_state,
      tabIndex: 0,
      title: s.gone ? "cleared by the engine when its stage or task ended; kept by this page" : "show details",
      onclick: () => selectStep(s.step_id),
      onkeydown: (e) => e.key === "Enter" && selectStep(s.step_id),
    },
    h("span", { class: "icon", text: stepIcon(s.execution_state) }),
    h("code", { class: "exec", text: s.executor }),
    s.type === "tool" ? h("span", { class: "pill tool", text: "tool" }) : null,
    interrupted(s) ? h("span", { class: "pill interrupted", title: s.execute_result.error, text: "✋ interrupted" }) : null,
    h("span", { class: "intent", text: s.step_intention }),
    u.total_tokens ? h("span", { class: "tok", text: `${tokens(u.total_tokens)} tok` }) : null,
  );
}

/** renderDetails shows every field of the selected step. */
export function renderDetails(el) {
  const id = store.selectedStep;
  const rerender = () => store.selectedStep === id && renderDetails(el);
  const s = store.steps[id] || store.gone[id] || trailStep(id);
  if (!s) {
    // A step of an ended stage, picked from the timeline: the trail has it.
    const r = id && store.selectedTask ? loadStep(store.selectedTask, id, "", rerender) : null;
    fill(el, h("p", { class: "empty", text: !id ? "Select a step to see its details." : r && r.loading ? "Reading the step from the trail…" : "This step is gone." }));
    return;
  }
  const u = s.usage || {};
  const row = (k, ...v) => [h("dt", { text: k }), h("dd", {}, ...v)];
  fill(el,
    h("div", { class: "detail-title" }, h("span", { class: "icon", text: stepIcon(s.execution_state) }), h("b", { text: s.step_intention })),
    h(
      "dl",
      { class: "kv", "data-step-id": s.step_id },
      row("state", stateBadge(s.execution_state), store.gone[id] ? h("span", { class: "muted", text: " (cleared by the engine)" }) : null),
      row("executor", h("code", { text: s.executor }), ` (${s.type})`),
      row("agent", nameOf(s.agent_id)),
      row("stage", s.stage_id === NO_RELATIVE ? "outside stages" : short(s.stage_id)),
      row("step id", h("code", { text: s.step_id })),
      row("tokens", `${u.total_tokens || 0} (prompt ${u.prompt_tokens || 0} + completion ${u.completion_tokens || 0})`),
      row("LLM calls", `${u.calls || 0} · latency ${ms(u.latency_ms)}`),
      row("prompt size", chars(u.prompt_chars)),
      row("result size", chars(u.response_chars)),
      row("created", stamp(s.created_at)),
      row("ran", s.started_at ? `${clock(s.started_at)} → ${clock(s.finished_at) || "…"}` : "not yet"),
      s.reply_to ? row("replies to", nameOf(s.reply_to)) : null,
    ),
    block("text_content", s.text_content || "—"),
    block("instruction_content", json(s.instruction_content)),
    block("execute_result", json(s.execute_result)),
    h("section", { class: "block" }, h("h3", { text: "LLM and tool calls (trail)" }), stepTrail(s.task_id, s, rerender)),
  );
}

function block(title, text) {
  return h("section", { class: "block" }, h("h3", { text: title }), h("pre", { text }));
}
