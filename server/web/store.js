// store.js: what the page knows of the MAS (read from /api/states and
// /api/inbox), and the calls to the JSON API.

import { short } from "./dom.js";

/** The system sender of engine notices (engine.SystemSender). */
export const SYSTEM = "mas.system";

/** store holds the last states read; render functions only read it. */
export const store = {
  /** @type {{human_agent_id: string, name: string, tokens_required: boolean} | null} */
  me: null,
  // loaded: the task list was read at least once since the page (re)bound;
  // until then the page says "loading…", not "No tasks."
  loaded: false,
  tasks: {}, // task_id → task_state (with stage_list, shared_conversation_pool)
  agents: {}, // agent_id → agent_state (step lists are read as steps)
  steps: {}, // step_id → step_state, as the server has them now
  // Steps the server dropped since (the engine clears an agent's steps
  // when their stage or task ends): kept so the page still shows the work.
  gone: {},
  inbox: [], // the operator's inbox entries, awaiting a reply first
  selectedTask: "", // task_id shown in the center
  followNewest: true, // select new tasks as they come, until the user picks one
  selectedStep: "",
};

/** nameOf is an agent's name for display ("system" for engine notices). */
export function nameOf(id) {
  if (id === SYSTEM) return "system";
  const a = store.agents[id];
  return a ? a.name : short(id);
}

/** ApiError is a failed API call; status 0 means the server was unreachable. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

const hooks = { unauthorized: () => {}, unreachable: () => {} };

/** onApi sets what happens on 401 answers and on network failures. */
export function onApi(h) {
  Object.assign(hooks, h);
}

/**
 * api calls the JSON API and returns the decoded answer. A 401 opens the
 * bind dialog (through the hook) unless quiet401; errors carry the server's
 * message ({"success": false, "message": …}).
 */
export async function api(path, { method = "GET", body, quiet401 = false } = {}) {
  let res;
  try {
    res = await fetch(path, {
      method,
      headers: body === undefined ? {} : { "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
      cache: "no-store",
    });
  } catch (err) {
    hooks.unreachable(err);
    throw new ApiError(0, "server unreachable");
  }
  let data = null;
  const text = await res.text();
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { message: text.trim() };
  }
  if (!res.ok) {
    if (res.status === 401 && !quiet401) hooks.unauthorized(data && data.message);
    throw new ApiError(res.status, (data && data.message) || `${res.status} ${res.statusText}`);
  }
  return data;
}

/** groupOf lists the members of a task's group, the operator first. */
export function groupOf(task) {
  return task ? task.task_group || [] : [];
}

/**
 * stepsOf lists the steps (current and gone) that match pred in execution
 * order: those that ran by start time, then those to do in their agent's
 * todo order (steps planned together share their creation time).
 */
export function stepsOf(pred) {
  const todo = new Map();
  for (const a of Object.values(store.agents)) {
    ((a.agent_step && a.agent_step.todo_list) || []).forEach((id, i) => todo.set(id, i));
  }
  const key = (s) => {
    if (s.started_at && !s.started_at.startsWith("0001-")) return s.started_at;
    const i = todo.has(s.step_id) ? todo.get(s.step_id) : 99999;
    return "~" + String(i).padStart(6, "0"); // after every timestamp
  };
  const all = [];
  for (const s of Object.values(store.steps)) if (pred(s)) all.push({ s, k: key(s) });
  for (const s of Object.values(store.gone)) if (pred(s)) all.push({ s: { ...s, gone: true }, k: key(s) });
  all.sort((a, b) => (a.k < b.k ? -1 : a.k > b.k ? 1 : a.s.created_at < b.s.created_at ? -1 : a.s.created_at > b.s.created_at ? 1 : 0));
  return all.map((x) => x.s);
}

// At most this many gone steps are kept (the oldest are forgotten first).
const MAX_GONE = 5000;

/** setSteps replaces the steps read from the server, keeping dropped ones as gone. */
export function setSteps(next) {
  for (const [id, s] of Object.entries(store.steps)) {
    if (!(id in next)) store.gone[id] = s;
  }
  for (const [id, s] of Object.entries(store.gone)) {
    if (id in next || !store.tasks[s.task_id]) delete store.gone[id];
  }
  const gone = Object.values(store.gone);
  if (gone.length > MAX_GONE) {
    gone.sort((a, b) => (a.created_at < b.created_at ? -1 : 1));
    for (const s of gone.slice(0, gone.length - MAX_GONE)) delete store.gone[s.step_id];
  }
  store.steps = next;
}

/** reset forgets everything (another operator was bound, or the server restarted). */
export function reset() {
  store.loaded = false;
  store.tasks = {};
  store.agents = {};
  store.steps = {};
  store.gone = {};
  store.inbox = [];
}
