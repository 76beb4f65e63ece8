// task-view.js: the mas-mcp task view, an MCP App (extension
// io.modelcontextprotocol/ui). The host renders it when add_task or
// show_task is called and hands it the call's result; from then on the view
// keeps itself up to date through tool calls relayed by the host:
// show_task for the task as it is, wait_for_updates (a long poll, so no
// timer) to learn when it changed, send_message and answer_approval for the
// operator's answers to the agents. Text is always set as text, never as
// markup.

import { App } from "@modelcontextprotocol/ext-apps";

const $ = (id) => document.getElementById(id);
const ENDED = new Set(["finished", "failed", "cancelled"]);
// How long one wait_for_updates call waits (the server's default is 30 s;
// below the SDK's request timeout of 60 s).
const WAIT_SECONDS = 25;
// After a failed call, the next try waits this long (the host or the
// server may be restarting).
const RETRY_MS = 2000;

const app = new App({ name: "mas-mcp task view", version: "1.0.0" }, {}, { autoResize: true });

// seen keeps each agent's last non-empty steps: the server drops an agent's
// steps when their stage or task ends, the view still shows the work.
const state = { taskID: "", view: null, cursor: 0, looping: false, seen: new Map() };

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") el.textContent = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) el.append(c);
  return el;
}

function status(text, error = false) {
  const el = $("status");
  el.textContent = text;
  el.classList.toggle("error", error);
}

function live(on, text) {
  const el = $("live");
  el.textContent = text;
  el.className = "live " + (on ? "on" : "off");
}

/** call calls one of the server's tools through the host; an error result throws. */
async function call(name, args) {
  const res = await app.callServerTool({ name, arguments: args });
  if (res.isError) {
    const text = (res.content || []).map((c) => c.text || "").join(" ").trim();
    throw new Error(text || `${name} failed`);
  }
  return res.structuredContent || {};
}

async function refresh() {
  const view = await call("show_task", { task_id: state.taskID });
  render(view);
}

/** follow re-reads the task whenever wait_for_updates reports a change of it. */
async function follow() {
  if (state.looping) return;
  state.looping = true;
  try {
    while (state.view && !ENDED.has(state.view.execution_state)) {
      try {
        const out = await call("wait_for_updates", { cursor: state.cursor, task_id: state.taskID, timeout_seconds: WAIT_SECONDS });
        live(true, "● live");
        if ((out.events && out.events.length) || out.lost) await refresh();
        else state.cursor = Math.max(state.cursor, out.cursor || 0);
      } catch (err) {
        live(false, "● offline, retrying");
        status(err.message, true);
        await new Promise((r) => setTimeout(r, RETRY_MS));
        // A restarted server forgets cursors: start again from a fresh view.
        await refresh().catch(() => {});
      }
    }
    if (state.view) {
      const el = $("live");
      el.textContent = "ended";
      el.className = "live";
    }
  } finally {
    state.looping = false;
  }
}

function render(v) {
  state.view = v;
  state.cursor = v.cursor || 0;
  $("title").textContent = v.task_name || v.task_id;
  const badge = $("state");
  badge.textContent = v.execution_state;
  badge.dataset.state = v.execution_state;
  $("intention").textContent = v.task_intention || "";
  renderQuestions(v);
  const stages = v.stages || [];
  $("stages").replaceChildren(
    ...(stages.length
      ? stages.map((s) =>
          h(
            "li",
            { "data-stage-id": s.stage_id, "data-state": s.execution_state },
            h("span", { text: s.stage_intention }),
            " ",
            h("span", { class: "badge", "data-state": s.execution_state, text: s.execution_state }),
            h("ul", { class: "stage-agents" }, ...(s.agents || []).map((a) => h("li", { text: `${a.name}: ${a.state || "—"} · ${a.goal}` }))),
          ),
        )
      : [h("li", { class: "muted", text: "The manager is planning the stages…" })]),
  );
  for (const a of v.agents || []) {
    if (a.steps && a.steps.length) state.seen.set(a.agent_id, a.steps);
    else a.steps = state.seen.get(a.agent_id) || [];
  }
  $("agents").replaceChildren(
    ...(v.agents || []).map((a) =>
      h(
        "article",
        { class: "agent", "data-agent-id": a.agent_id, "data-state": a.working_state },
        h("h3", {}, h("span", { text: a.name }), h("small", { text: `${a.role} · ${a.working_state}` })),
        h(
          "ol",
          { class: "steps" },
          ...(a.steps || []).map((s) =>
            h(
              "li",
              { "data-step-id": s.step_id, "data-state": s.execution_state },
              h("b", { text: s.executor || s.type }),
              " ",
              h("span", { text: s.step_intention }),
              h("span", { class: "step-state", text: s.execution_state }),
            ),
          ),
        ),
      ),
    ),
  );
  const summary = $("summary");
  summary.hidden = !v.task_summary;
  summary.textContent = v.task_summary || "";
}

function renderQuestions(v) {
  const qs = v.questions || [];
  // Keep what the operator is typing, where the focus is and a click under
  // way: the elements of questions still open are reused, not rebuilt, and
  // left in the document (moved only when the order changes). Chromium
  // drops the click of a button whose element left the document between
  // mousedown and mouseup, even if it was put straight back (as
  // replaceChildren does): the reply was never sent.
  const box = $("questions");
  const old = new Map([...box.querySelectorAll(".question")].map((el) => [el.dataset.messageId, el]));
  const want = qs.map((q) => old.get(q.message_id) || question(q));
  for (const el of old.values()) if (!want.includes(el)) el.remove();
  want.forEach((el, i) => {
    if (box.children[i] !== el) box.insertBefore(el, box.children[i] || null);
  });
}

function question(q) {
  const text = h("textarea", { "aria-label": `Your reply to ${q.sender_name}`, placeholder: "Your answer…" });
  const buttons = [];
  const act = async (what, f) => {
    buttons.forEach((b) => (b.disabled = true));
    status(`${what}…`);
    try {
      await f();
      status(`${what}: done.`);
      await refresh();
    } catch (err) {
      status(`${what}: ${err.message}`, true);
      buttons.forEach((b) => (b.disabled = false));
    }
  };
  const reply = h("button", {
    class: "primary reply",
    text: "Send reply",
    onclick: () =>
      text.value.trim()
        ? act("Reply", () =>
            call("send_message", { task_id: state.taskID, receiver: [q.sender_id], content: text.value.trim(), reply_to: q.message_id }),
          )
        : status("Write an answer first.", true),
  });
  const approve = h("button", { class: "approve", text: "Approve", title: "For approval questions: let the tool call run", onclick: () => act("Approve", () => call("answer_approval", { message_id: q.message_id, approve: true, note: text.value.trim() || undefined })) });
  const deny = h("button", { class: "deny", text: "Deny", title: "For approval questions: refuse the tool call", onclick: () => act("Deny", () => call("answer_approval", { message_id: q.message_id, approve: false, note: text.value.trim() || undefined })) });
  // Approve and Deny only where a tool call waits on the answer.
  const actions = q.approval ? [reply, approve, deny] : [reply];
  buttons.push(...actions);
  return h(
    "div",
    { class: "question" + (q.urgent ? " urgent" : ""), "data-message-id": q.message_id },
    h("strong", { text: `${q.sender_name} asks${q.urgent ? " (waiting for you)" : ""}:` }),
    h("p", { text: q.content }),
    text,
    h("div", { class: "actions" }, ...actions),
  );
}

/** start shows the task of a tool result (add_task's or show_task's). */
async function start(result) {
  const sc = (result && result.structuredContent) || {};
  if (!sc.task_id) {
    status("This tool result names no task.", true);
    return;
  }
  state.taskID = sc.task_id;
  try {
    if (Array.isArray(sc.stages)) render(sc);
    else await refresh();
    live(true, "● live");
  } catch (err) {
    status(err.message, true);
  }
  follow();
}

app.ontoolinput = (p) => {
  const id = p && p.arguments && p.arguments.task_id;
  if (id && !state.taskID) $("title").textContent = `Task ${id}`;
};
app.ontoolresult = (result) => start(result);
app.onteardown = async () => {
  state.view = null; // ends the loop after its current wait
  return {};
};

app.connect().catch((err) => status(`Cannot reach the host: ${err.message}`, true));
