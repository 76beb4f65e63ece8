// chat.js: the selected task's conversation as a group chat (spec §10.5)
// and the composer: @-mention to choose receivers, message type (FYI,
// action required, urgent), sending through POST /api/send_message.

import { h, fill, place, clock, nearBottom } from "./dom.js";
import { store, nameOf, api, SYSTEM } from "./store.js";

/** KINDS: spec §10.5.2's message types, by the fields that carry them. */
export const KINDS = {
  fyi: { icon: "📢", label: "FYI" },
  action: { icon: "☑", label: "reply needed" },
  urgent: { icon: "🚨", label: "urgent" },
};

/** kindOf: urgent (the sender waits), action required (need_reply) or FYI. */
export function kindOf(m) {
  const waiting = Array.isArray(m.waiting) ? m.waiting.length > 0 : !!m.waiting;
  if (waiting) return "urgent";
  return m.need_reply ? "action" : "fyi";
}

export function kindTag(kind) {
  const k = KINDS[kind];
  return h("span", { class: `kind kind-${kind}`, title: k.label }, h("span", { class: "kind-icon", text: k.icon }), ` ${k.label}`);
}

// The chat list is keyed by message_id, so a re-render keeps the elements
// (and any text selection) of messages already shown.
const chatCache = { task: "", me: "", names: "", els: new Map() };

/** renderChat shows the selected task's shared_conversation_pool. */
export function renderChat(list, focusInbox) {
  const t = store.tasks[store.selectedTask];
  const me = store.me ? store.me.human_agent_id : "";
  const pool = t ? t.shared_conversation_pool || [] : [];
  const names = Object.values(store.agents)
    .map((a) => a.agent_id + a.name)
    .join();
  const awaiting = new Set(store.inbox.filter((e) => e.awaiting_reply).map((e) => e.message_id));
  if (chatCache.task !== store.selectedTask || chatCache.me !== me || chatCache.names !== names) {
    chatCache.els.clear();
    Object.assign(chatCache, { task: store.selectedTask, me, names });
  }
  const stick = nearBottom(list);
  if (pool.length === 0) {
    fill(list, h("li", { class: "empty", text: t ? "No messages in this task yet." : "" }));
    return;
  }
  const used = new Map();
  const els = groupNotices(pool).map((m) => {
    const key = m.message_id + "/" + m.receiver.length;
    const el = chatCache.els.get(key) || message(m, me);
    used.set(key, el);
    const btn = el.querySelector(".answer");
    if (btn) btn.hidden = !awaiting.has(m.message_id);
    if (btn && !btn.dataset.wired) {
      btn.dataset.wired = "1";
      btn.addEventListener("click", () => focusInbox(m.message_id));
    }
    return el;
  });
  chatCache.els = used;
  place(list, els);
  // Follow new messages if the end was in view (or the task just changed).
  if (stick || list.dataset.task !== store.selectedTask) list.scrollTop = list.scrollHeight;
  list.dataset.task = store.selectedTask;
}

// groupNotices merges consecutive identical engine notices (the engine
// sends one per receiver) into one, addressed to all their receivers.
function groupNotices(pool) {
  const out = [];
  for (const m of pool) {
    const prev = out.at(-1);
    if (prev && m.sender_id === SYSTEM && prev.sender_id === SYSTEM && prev.message === m.message && noticeKind(prev) === noticeKind(m)) {
      prev.receiver = [...prev.receiver, ...(m.receiver || [])];
      continue;
    }
    out.push({ ...m, receiver: [...(m.receiver || [])] });
  }
  return out;
}

const noticeKind = (m) => (m.instruction ? Object.keys(m.instruction)[0] : "");

function message(m, me) {
  const time = h("time", { datetime: m.timestamp, text: clock(m.timestamp) });
  const to = (m.receiver || []).map((r) => (r === me ? "you" : nameOf(r))).join(", ");
  if (m.sender_id === SYSTEM) {
    const instr = noticeKind(m);
    const body = m.message || (instr ? `instruction ${instr.replaceAll("_", " ")}` : "");
    const el = h(
      "li",
      { class: "msg system" + (m.message.length > 160 ? " long" : ""), "data-message-id": m.message_id, title: "click to expand" },
      h("div", { class: "sys-head" }, h("span", { class: "sys-icon", text: "⚙" }), h("b", { text: "system" }), ` → ${to}`, h("span", { class: "spacer" }), time),
      h("div", { class: "body", text: body }),
    );
    if (m.message.length > 160) el.addEventListener("click", () => el.classList.toggle("open"));
    return el;
  }
  const kind = kindOf(m);
  const toMe = (m.receiver || []).includes(me);
  const mine = m.sender_id === me;
  return h(
    "li",
    {
      class: `msg kind-${kind}` + (toMe ? " to-me" : "") + (mine ? " mine" : ""),
      "data-message-id": m.message_id,
      "data-kind": kind,
    },
    h(
      "div",
      { class: "msg-head" },
      h("b", { class: "sender", text: mine ? "you" : nameOf(m.sender_id) }),
      h("span", { class: "to", text: `→ ${to}` }),
      toMe ? h("span", { class: "at-me", title: "this message is addressed to you", text: "@me" }) : null,
      m.return_waiting_id ? h("span", { class: "pill", title: "answers a question its receiver was waiting on", text: "↩ reply" }) : null,
      h("span", { class: "spacer" }),
      kindTag(kind),
      time,
    ),
    h("div", { class: "body", text: m.message }),
    toMe ? h("button", { type: "button", class: "answer link", hidden: true, text: "answer in inbox ↗" }) : null,
  );
}

// --- composer

const composer = { receivers: [], kind: "action", task: "", mention: null };

/** initComposer wires the composer's controls once. */
export function initComposer() {
  const form = document.getElementById("composer");
  const text = document.getElementById("compose-text");
  const list = document.getElementById("mention-list");
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    send();
  });
  for (const r of form.querySelectorAll('input[name="kind"]')) r.addEventListener("change", () => (composer.kind = r.value));
  text.addEventListener("input", () => updateMention(text, list));
  text.addEventListener("click", () => updateMention(text, list));
  text.addEventListener("blur", () => setTimeout(() => closeMention(list), 150));
  text.addEventListener("keydown", (e) => {
    const mm = composer.mention;
    if (mm && !list.hidden) {
      if (e.key === "ArrowDown" || e.key === "ArrowUp") {
        e.preventDefault();
        mm.active = (mm.active + (e.key === "ArrowDown" ? 1 : mm.items.length - 1)) % mm.items.length;
        drawMention(list);
        return;
      }
      if (e.key === "Enter" || e.key === "Tab") {
        e.preventDefault();
        choose(mm.items[mm.active]);
        return;
      }
      if (e.key === "Escape") {
        e.preventDefault();
        closeMention(list);
        return;
      }
    }
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      send();
    }
  });
}

/** candidates: the task's group but the operator, with "all" first. */
function candidates() {
  const t = store.tasks[store.selectedTask];
  const me = store.me ? store.me.human_agent_id : "";
  const members = (t ? t.task_group || [] : []).filter((id) => id !== me);
  const out = members.map((id) => {
    const a = store.agents[id];
    return { id, name: nameOf(id), role: a ? a.role : "", ids: [id] };
  });
  if (members.length > 1) out.push({ id: "*", name: "all", role: `everyone in the task (${members.length})`, ids: members });
  return out;
}

function updateMention(text, list) {
  const before = text.value.slice(0, text.selectionStart);
  const m = /(^|\s)@([^\s@]*)$/.exec(before);
  if (!m) return closeMention(list);
  const q = m[2].toLowerCase();
  const items = candidates().filter((c) => c.name.toLowerCase().includes(q) && !(c.ids.length === 1 && composer.receivers.includes(c.id)));
  items.sort((a, b) => b.name.toLowerCase().startsWith(q) - a.name.toLowerCase().startsWith(q));
  if (items.length === 0) return closeMention(list);
  composer.mention = { start: before.length - m[2].length - 1, end: text.selectionStart, items, active: 0 };
  drawMention(list);
}

function drawMention(list) {
  const mm = composer.mention;
  fill(list,
    ...mm.items.map((c, i) =>
      h(
        "li",
        {
          role: "option",
          class: "mention" + (i === mm.active ? " active" : ""),
          "aria-selected": i === mm.active ? "true" : "false",
          "data-agent-id": c.id,
          onmousedown: (e) => {
            e.preventDefault();
            choose(c);
          },
        },
        h("b", { text: "@" + c.name }),
        c.role ? h("span", { class: "muted", text: c.role }) : null,
      ),
    ),
  );
  list.hidden = false;
}

function closeMention(list) {
  composer.mention = null;
  list.hidden = true;
}

function choose(c) {
  const text = document.getElementById("compose-text");
  const mm = composer.mention;
  if (mm) {
    text.value = text.value.slice(0, mm.start) + text.value.slice(mm.end).replace(/^\s*/, "");
    text.setSelectionRange(mm.start, mm.start);
  }
  for (const id of c.ids) if (!composer.receivers.includes(id)) composer.receivers.push(id);
  closeMention(document.getElementById("mention-list"));
  drawReceivers();
  text.focus();
}

/** defaultReceivers: the task's manager (the operator's usual contact), else everyone. */
function defaultReceivers() {
  const t = store.tasks[store.selectedTask];
  const me = store.me ? store.me.human_agent_id : "";
  if (!t) return [];
  if (t.task_manager && t.task_manager !== me && (t.task_group || []).includes(t.task_manager)) return [t.task_manager];
  return (t.task_group || []).filter((id) => id !== me);
}

function drawReceivers() {
  const el = document.getElementById("receivers");
  if (composer.receivers.length === 0) {
    const def = defaultReceivers();
    fill(el,
      ...def.map((id) => h("span", { class: "chip default", title: "default receiver: the task's manager; type @ to choose others", "data-agent-id": id, text: `@${nameOf(id)} (default)` })),
    );
    return;
  }
  fill(el,
    ...composer.receivers.map((id) =>
      h(
        "span",
        { class: "chip", "data-agent-id": id },
        `@${nameOf(id)}`,
        h("button", {
          type: "button",
          class: "chip-x",
          title: `remove ${nameOf(id)}`,
          "aria-label": `remove ${nameOf(id)}`,
          text: "×",
          onclick: () => {
            composer.receivers = composer.receivers.filter((r) => r !== id);
            drawReceivers();
          },
        }),
      ),
    ),
  );
}

/** updateComposer follows the selected task: its group, whether one may write. */
export function updateComposer() {
  const t = store.tasks[store.selectedTask];
  const me = store.me ? store.me.human_agent_id : "";
  if (composer.task !== store.selectedTask) {
    composer.task = store.selectedTask;
    composer.receivers = [];
    setStatus("");
  }
  const group = t ? t.task_group || [] : [];
  composer.receivers = composer.receivers.filter((id) => group.includes(id));
  let why = "";
  if (!t) why = "Select a task to write to its group.";
  else if (t.execution_state === "finished" || t.execution_state === "failed") why = `This task has ${t.execution_state}: its chat is read-only.`;
  else if (!group.includes(me)) why = "You are not in this task's group.";
  const form = document.getElementById("composer");
  form.classList.toggle("disabled", !!why);
  for (const el of form.querySelectorAll("textarea, button, input")) el.disabled = !!why;
  if (why) setStatus(why, "muted");
  else if (form.dataset.why) setStatus("");
  form.dataset.why = why;
  drawReceivers();
}

function setStatus(msg, cls = "") {
  const el = document.getElementById("compose-status");
  el.textContent = msg;
  el.className = "status-line " + cls;
}

async function send() {
  const text = document.getElementById("compose-text");
  const content = text.value.trim();
  const receivers = composer.receivers.length ? composer.receivers : defaultReceivers();
  if (!content) return setStatus("Write a message first.", "error");
  if (receivers.length === 0) return setStatus("Nobody to send to: mention someone with @.", "error");
  const btn = document.getElementById("send");
  btn.disabled = true;
  try {
    await api("/api/send_message", {
      method: "POST",
      body: {
        human_agent_id: store.me.human_agent_id,
        task_id: store.selectedTask,
        receiver: receivers,
        content,
        need_reply: composer.kind !== "fyi",
        waiting: composer.kind === "urgent",
      },
    });
    text.value = "";
    setStatus(`Sent ${KINDS[composer.kind].icon} to ${receivers.map(nameOf).join(", ")}.`, "ok");
  } catch (err) {
    setStatus(`Not sent: ${err.message}`, "error");
  } finally {
    btn.disabled = false;
  }
}
