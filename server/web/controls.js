// controls.js: the operator's buttons — pause/resume a task or an agent,
// interrupt an agent (its running step is cancelled and the instruction
// becomes its next step), approve/deny a tool call's question. They call
// POST /api/control and POST /api/answer_approval; the page shows the
// outcome when the change arrives as an event, like any other.

import { h } from "./dom.js";
import { api } from "./store.js";

const ENDED = new Set(["finished", "failed"]);

/** status tells the operator what a control did, or why not. */
function status(text, error) {
  let el = document.getElementById("control-status");
  if (!el) {
    el = h("p", { id: "control-status", class: "control-status", role: "status", "aria-live": "polite" });
    document.body.appendChild(el);
  }
  el.textContent = text;
  el.className = "control-status" + (error ? " error" : " ok");
  el.hidden = false;
  clearTimeout(status.timer);
  status.timer = setTimeout(() => (el.hidden = true), error ? 8000 : 3000);
}

async function control(body, done) {
  try {
    await api("/api/control", { method: "POST", body });
    status(done);
  } catch (err) {
    status(`${body.action}: ${err.message}`, true);
  }
}

/** taskControls: the task's paused pill and its pause/resume button. */
export function taskControls(t) {
  if (!t || t.base || ENDED.has(t.execution_state)) return null;
  const paused = !!t.paused;
  return h(
    "span",
    { class: "controls task-controls" },
    paused ? h("span", { class: "pill paused", "data-paused": "task", text: "⏸ paused" }) : null,
    h("button", {
      type: "button",
      class: "ghost small",
      "data-control": paused ? "resume_task" : "pause_task",
      title: paused ? "let the task go on" : "hold the task: no new step starts, running steps finish",
      text: paused ? "▶ Resume task" : "⏸ Pause task",
      onclick: () => control({ action: paused ? "resume_task" : "pause_task", task_id: t.task_id }, paused ? "Task resumed." : "Task paused."),
    }),
  );
}

/** agentControls: an LLM agent's pause/resume and interrupt buttons. */
export function agentControls(id, a) {
  if (!a || a.kind !== "llm") return null;
  const paused = !!a.paused;
  return h(
    "span",
    { class: "controls agent-controls" },
    paused ? h("span", { class: "pill paused", "data-paused": "agent", text: "⏸ paused" }) : null,
    h("button", {
      type: "button",
      class: "ghost small",
      "data-control": paused ? "resume_agent" : "pause_agent",
      title: paused ? "let the agent go on" : "hold the agent: it starts no new step",
      text: paused ? "▶ Resume" : "⏸ Pause",
      onclick: (ev) => (ev.stopPropagation(), control({ action: paused ? "resume_agent" : "pause_agent", agent_id: id }, paused ? "Agent resumed." : "Agent paused.")),
    }),
    h("button", {
      type: "button",
      class: "ghost small",
      "data-control": "interrupt",
      title: "stop the step it runs now and give it an instruction instead",
      text: "✋ Interrupt",
      onclick: (ev) => {
        ev.stopPropagation();
        const instruction = window.prompt(`Interrupt ${a.name}: what should it do instead?`);
        if (instruction === null || !instruction.trim()) return;
        control({ action: "interrupt", agent_id: id, instruction, reason: "interrupted from the monitor" }, "Agent interrupted.");
      },
    }),
  );
}

/** approvalButtons: approve/deny for a question a tool call waits on. */
export function approvalButtons(e) {
  const note = h("input", { type: "text", class: "approval-note", placeholder: "note (optional)", "aria-label": "note" });
  const decide = (approve) => async (ev) => {
    ev.preventDefault();
    try {
      await api("/api/answer_approval", { method: "POST", body: { message_id: e.message_id, approve, note: note.value.trim() } });
      status(approve ? "Approved." : "Denied.");
    } catch (err) {
      status(`Not answered: ${err.message}`, true);
    }
  };
  return h(
    "div",
    { class: "approval-box" },
    note,
    h("button", { type: "button", class: "primary small", "data-decision": "approve", text: "✓ Approve", onclick: decide(true) }),
    h("button", { type: "button", class: "ghost small deny", "data-decision": "deny", text: "✗ Deny", onclick: decide(false) }),
  );
}

/** interrupted reports whether the operator stopped a step. */
export function interrupted(s) {
  const err = s.execute_result && s.execute_result.error;
  return typeof err === "string" && (err.startsWith("interrupted by the operator") || err.startsWith("cancelled by the operator"));
}
