// app.js: the mas-mcp monitor page (spec §8.5, §10.5). It reads the MAS's
// states from /api/states and /api/inbox, and re-reads what an event of
// /api/events says changed, as it happens (never on a timer). On "resync",
// and whenever the event stream (re)opens, it re-reads everything.

import { h, fill, short, clock } from "./dom.js";
import { store, api, onApi, setSteps, reset } from "./store.js";
import { orderedTasks, renderTasks, renderTaskHead, renderProgress, renderDetails } from "./board.js";
import { renderChat, initComposer, updateComposer } from "./chat.js";
import { renderInbox, focusEntry, dropToasts } from "./inbox.js";
import { renderTimeline } from "./trail.js";

const $ = (id) => document.getElementById(id);

// --- loading: each kind of state is read by one fetch at a time; what
// changes while it runs is read once more after it (events coalesce).

const loaders = {
  whoami: async () => {
    const me = await api("/api/whoami");
    if (!store.me || store.me.human_agent_id !== me.human_agent_id) reset();
    store.me = me;
  },
  tasks: async () => {
    store.tasks = await api("/api/states?type=task");
    store.loaded = true;
  },
  agents: async () => (store.agents = await api("/api/states?type=agent")),
  steps: async () => setSteps(await api("/api/states?type=step")),
  inbox: async () => (store.inbox = (await api("/api/inbox")).messages || []),
};
const ALL = ["whoami", "tasks", "agents", "steps", "inbox"];
const dirty = new Set();
let loading = false;

/** want marks kinds of state to re-read; they are read as soon as possible. */
function want(...kinds) {
  for (const k of kinds) dirty.add(k);
  pump();
}

async function pump() {
  if (loading || dirty.size === 0) return;
  loading = true;
  // whoami first: the other answers depend on who we are.
  const kinds = [...dirty].sort((a, b) => (a === "whoami" ? -1 : b === "whoami" ? 1 : 0));
  dirty.clear();
  try {
    if (kinds[0] === "whoami") await loaders.whoami();
    // Tasks before steps: steps of tasks the page knows are kept when gone.
    if (kinds.includes("tasks")) await loaders.tasks();
    await Promise.all(kinds.filter((k) => k !== "whoami" && k !== "tasks").map((k) => loaders[k]()));
    render();
  } catch (err) {
    if (err.status !== 401 && err.status !== 0) console.warn("monitor: reading states:", err.message);
    if (err.status === 0) kinds.forEach((k) => dirty.add(k)); // read again once the server is back
  } finally {
    loading = false;
    if (dirty.size && conn.state === "live") pump();
  }
}

// --- rendering

function selectTask(id, byUser = true) {
  if (byUser) store.followNewest = false;
  if (store.selectedTask === id) return;
  store.selectedTask = id;
  store.selectedStep = "";
  history.replaceState(null, "", id ? `#task=${encodeURIComponent(id)}` : location.pathname);
  render();
}

function selectStep(id) {
  store.selectedStep = id;
  render();
}

function render() {
  const tasks = orderedTasks();
  if (!store.tasks[store.selectedTask] || (store.followNewest && tasks.length && tasks[0].task_id !== store.selectedTask && !tasks[0].base)) {
    const pick = tasks.find((t) => !t.base) || tasks[0];
    store.selectedTask = pick ? pick.task_id : "";
    store.selectedStep = "";
  }
  const me = store.me;
  fill($("whoami"), me ? h("span", { title: me.human_agent_id }, "bound as ", h("b", { text: me.name || short(me.human_agent_id) })) : "");
  renderTasks($("tasks"), selectTask);
  renderTaskHead($("task-head"));
  renderProgress($("progress"), selectStep);
  renderChat($("chat"), focusEntry);
  updateComposer();
  renderInbox($("inbox"), $("inbox-counts"), (id) => selectTask(id));
  dropToasts();
  renderDetails($("details"));
  renderTimeline($("timeline"), selectStep, render);
}

// --- the event stream

const conn = { state: "connecting", es: null, retry: null, seq: 0, events: 0 };

function setConn(state, text) {
  conn.state = state;
  const el = $("conn");
  el.className = `conn ${state}`;
  el.textContent = text || { live: "● live", connecting: "connecting…", down: "● offline", unbound: "● not bound" }[state];
  $("banner").hidden = state !== "down";
  document.body.classList.toggle("offline", state === "down");
}

// Which states an event makes stale. Events name what changed; the page
// re-reads only those kinds.
function onEvent(kind, ev) {
  conn.seq = ev.seq || conn.seq;
  conn.events++;
  // seq is the operator's own number, from a random base of the server
  // process (not a count to show): the page counts what it received.
  $("lastevent").textContent = `event #${conn.events} ${kind.replaceAll("_", " ")} · ${clock(ev.time)}`;
  const me = store.me && ev.agent_id === store.me.human_agent_id;
  switch (kind) {
    case "task_added":
    case "task_changed":
    case "stage_changed":
    case "message_delivered":
      want("tasks");
      break;
    case "agent_added":
      want("agents");
      break;
    case "agent_changed":
      want("agents", "steps"); // finishing a stage or task drops steps
      break;
    case "step_changed":
      want("steps");
      break;
    case "llm_call":
      if (ev.agent_id) want("agents", "steps");
      else want("tasks");
      break;
  }
  if (me) want("inbox");
}

const KINDS = ["task_added", "task_changed", "stage_changed", "agent_added", "agent_changed", "step_changed", "message_delivered", "llm_call"];

function connect() {
  clearTimeout(conn.retry);
  if (conn.es) conn.es.close();
  const es = new EventSource("/api/events");
  conn.es = es;
  es.onopen = () => {
    setConn("live");
    want(...ALL); // (re)connected: whatever happened meanwhile is read anew
  };
  es.onerror = () => {
    if (es !== conn.es) return;
    if (es.readyState === EventSource.CONNECTING) {
      setConn("down"); // the browser retries by itself
      return;
    }
    // Closed for good (an HTTP error, e.g. 401): find out why, then retry.
    es.close();
    api("/api/whoami", { quiet401: true })
      .then(() => scheduleReconnect())
      .catch((err) => {
        if (err.status === 401) {
          setConn("unbound");
          openBind();
        } else {
          setConn("down");
          scheduleReconnect();
        }
      });
  };
  es.addEventListener("hello", (e) => {
    const ev = JSON.parse(e.data || "{}");
    conn.seq = ev.seq || 0;
  });
  es.addEventListener("resync", () => want(...ALL));
  for (const k of KINDS) {
    es.addEventListener(k, (e) => {
      let ev = {};
      try {
        ev = JSON.parse(e.data);
      } catch {
        /* an event without details: re-read everything */
        return want(...ALL);
      }
      onEvent(k, ev);
    });
  }
}

function scheduleReconnect() {
  clearTimeout(conn.retry);
  conn.retry = setTimeout(connect, 2000);
}

// --- binding to an operator (POST /api/bind_human_agent)

function openBind() {
  const dlg = $("bind");
  if (!dlg.open) $("bind-error").textContent = "";
  $("bind-cancel").hidden = !store.me;
  if (!dlg.open) dlg.showModal();
}

async function bind(e) {
  e.preventDefault();
  const body =
    e.target.id === "bind-token-form"
      ? { token: $("bind-token").value.trim() }
      : { human_agent_id: $("bind-id").value.trim(), password: $("bind-password").value };
  try {
    await api("/api/bind_human_agent", { method: "POST", body, quiet401: true });
  } catch (err) {
    $("bind-error").textContent = err.message;
    return;
  }
  for (const f of ["bind-token", "bind-id", "bind-password"]) $(f).value = "";
  $("bind").close();
  store.me = null;
  reset();
  connect();
}

// --- start

onApi({
  unauthorized: () => {
    setConn("unbound");
    openBind();
  },
  unreachable: () => {
    if (conn.state !== "live" || !conn.es || conn.es.readyState !== EventSource.OPEN) setConn("down");
  },
});

const m = /^#task=(.+)$/.exec(location.hash);
if (m) {
  store.selectedTask = decodeURIComponent(m[1]);
  store.followNewest = false;
}
$("bind-token-form").addEventListener("submit", bind);
$("bind-password-form").addEventListener("submit", bind);
$("bind-cancel").addEventListener("click", () => $("bind").close());
$("bind").addEventListener("cancel", (e) => !store.me && e.preventDefault());
$("switch-operator").addEventListener("click", () => openBind());
initComposer();
render();
connect();
