// inbox.js: the operator's inbox (GET /api/inbox): messages awaiting a
// reply first, urgent ones most visibly, each with a reply box that answers
// its sender in its task (POST /api/send_message with reply_to).

import { h, fill, place, clock } from "./dom.js";
import { store, nameOf, api } from "./store.js";
import { kindOf, kindTag } from "./chat.js";
import { approvalButtons } from "./controls.js";

// Entries are keyed by message_id: a re-render keeps their elements, so a
// reply being typed survives every update.
const els = new Map();
const seenUrgent = new Set();

/** renderInbox shows the inbox; openTask selects a task. */
export function renderInbox(list, counts, openTask) {
  const entries = store.inbox;
  const keep = new Set(entries.map((e) => e.message_id));
  for (const id of els.keys()) if (!keep.has(id)) els.delete(id);
  const urgent = entries.filter((e) => e.awaiting_reply && e.waiting).length;
  const awaiting = entries.filter((e) => e.awaiting_reply).length;
  fill(counts,
    urgent ? h("span", { class: "pill urgent", text: `🚨 ${urgent} urgent` }) : null,
    awaiting - urgent ? h("span", { class: "pill warn", text: `☑ ${awaiting - urgent} to answer` }) : null,
    !awaiting ? h("span", { class: "muted", text: entries.length ? "nothing to answer" : "" }) : null,
  );
  document.title = (awaiting ? `(${awaiting}) ` : "") + "mas-mcp monitor";
  if (entries.length === 0) {
    fill(list, h("li", { class: "empty", text: "No messages to you." }));
    return;
  }
  const ordered = entries.map((e) => {
    let el = els.get(e.message_id);
    if (!el) {
      el = entry(e, openTask);
      els.set(e.message_id, el);
    }
    update(el, e);
    return el;
  });
  place(list, ordered);
  for (const e of entries) {
    if (e.awaiting_reply && e.waiting && !seenUrgent.has(e.message_id)) {
      seenUrgent.add(e.message_id);
      toast(e);
    }
  }
}

function entry(e, openTask) {
  const t = store.tasks[e.task_id];
  const text = h("textarea", { rows: 2, placeholder: `Reply to ${nameOf(e.sender_id)}…`, "aria-label": `Reply to ${nameOf(e.sender_id)}` });
  const status = h("span", { class: "status-line" });
  const button = h("button", { type: "submit", class: "primary small", text: "Reply" });
  const form = h("form", { class: "reply-box" }, text, h("div", { class: "reply-actions" }, status, button));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const content = text.value.trim();
    if (!content) {
      status.textContent = "Write a reply first.";
      status.className = "status-line error";
      return;
    }
    button.disabled = true;
    try {
      // need_reply is left to the server: an answer to a pending question
      // needs no reply back.
      await api("/api/send_message", {
        method: "POST",
        body: { human_agent_id: store.me.human_agent_id, task_id: e.task_id, receiver: [e.sender_id], content, reply_to: e.message_id },
      });
      text.value = "";
      status.textContent = "Sent.";
      status.className = "status-line ok";
    } catch (err) {
      status.textContent = `Not sent: ${err.message}`;
      status.className = "status-line error";
    } finally {
      button.disabled = false;
    }
  });
  text.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      form.requestSubmit();
    }
  });
  return h(
    "li",
    { class: "inbox-entry", "data-message-id": e.message_id, "data-task-id": e.task_id },
    h(
      "div",
      { class: "entry-head" },
      h("span", { class: "kind-slot" }),
      h("b", { text: nameOf(e.sender_id) }),
      h("button", { type: "button", class: "link task-link", title: "show this task", text: t ? t.task_name : e.task_id.slice(0, 8), onclick: () => openTask(e.task_id) }),
      h("span", { class: "spacer" }),
      h("time", { datetime: e.timestamp, text: clock(e.timestamp) }),
    ),
    h("div", { class: "body", text: e.content }),
    h("div", { class: "answered", text: "✓ answered" }),
    e.approval ? approvalButtons(e) : null,
    form,
  );
}

function update(el, e) {
  const kind = kindOf(e);
  el.className = `inbox-entry kind-${kind}` + (e.awaiting_reply ? " awaiting" : " done") + (e.awaiting_reply && e.waiting ? " urgent" : "");
  el.dataset.kind = kind;
  el.dataset.awaiting = e.awaiting_reply ? "true" : "false";
  const slot = el.querySelector(".kind-slot");
  if (slot.dataset.kind !== kind) {
    slot.dataset.kind = kind;
    fill(slot, kindTag(kind));
  }
  el.querySelector(".answered").hidden = e.awaiting_reply || !e.need_reply;
  el.querySelector(".reply-box").hidden = !e.awaiting_reply;
  const approval = el.querySelector(".approval-box");
  if (approval) approval.hidden = !e.awaiting_reply;
}

/** focusEntry scrolls to an inbox entry and puts the caret in its reply box. */
export function focusEntry(messageID) {
  const el = els.get(messageID);
  if (!el) return;
  el.scrollIntoView({ block: "nearest", behavior: "smooth" });
  const t = el.querySelector("textarea");
  if (t && !t.closest("[hidden]")) t.focus();
  el.classList.add("flash");
  setTimeout(() => el.classList.remove("flash"), 1200);
}

// An urgent message gets a strong reminder (spec §10.5.2): a toast until
// the operator opens it or closes it.
function toast(e) {
  const holder = document.getElementById("toasts") || document.body.appendChild(h("div", { id: "toasts", class: "toasts", "aria-live": "assertive" }));
  const close = () => t.remove();
  const t = h(
    "div",
    { class: "toast", role: "alert", "data-message-id": e.message_id },
    h("span", { class: "toast-icon", text: "🚨" }),
    h("div", { class: "toast-text" }, h("b", { text: `${nameOf(e.sender_id)} is waiting for your answer` }), h("div", { class: "body", text: e.content })),
    h("div", { class: "toast-actions" },
      h("button", { type: "button", class: "primary small", text: "Answer", onclick: () => (close(), focusEntry(e.message_id)) }),
      h("button", { type: "button", class: "ghost small", "aria-label": "dismiss", text: "×", onclick: close }),
    ),
  );
  holder.appendChild(t);
}

/** dropToasts removes the toasts of messages no longer awaiting an answer. */
export function dropToasts() {
  const open = new Set(store.inbox.filter((e) => e.awaiting_reply).map((e) => e.message_id));
  for (const t of document.querySelectorAll(".toast")) if (!open.has(t.dataset.messageId)) t.remove();
}
