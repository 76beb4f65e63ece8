#!/usr/bin/env node
// monitor.mjs drives the mas-mcp monitor page in Debian's Chromium with
// playwright-core (pinned in package.json; it never downloads a browser):
// it opens the page of a running mas-mcp, has the Go test hand over a task,
// watches the task progress live (no reload), answers the agent's urgent
// question from the inbox's reply box, sees the agent react and the task
// finish, checks the composer's @-mention, writes a full-page screenshot,
// and finally checks the "server unreachable" banner and the reconnection
// while the Go test restarts the server.
//
// With --bind-token, it checks the bind dialog of a server that requires
// tokens instead: the page opens it on the API's 401, refuses a wrong
// token, and goes live as the token's operator.
//
// Usage: node monitor.mjs [options] URL
//   --screenshot FILE   the full-page PNG of the finished task (required)
//   --bind-token TOKEN  check the bind dialog with this (good) token
//   --operator NAME     the name of the token's operator (with --bind-token)
//   --password-operator NAME, --password PW
//                       then switch to this operator with its password
//   --question-shot FILE the PNG of the page when the agent's question arrived
//   --offline-shot FILE the PNG of the page while the server is down
//   --question TEXT     the question the agent asks the operator
//   --answer TEXT       what the operator answers
//   --summary TEXT      the task summary expected at the end
//   --timeout SECONDS   overall deadline (default 90)
//   --chromium PATH     the browser (default /usr/bin/chromium)
//
// It talks with the Go test over stdin/stdout, one line each:
//   → READY            the page is live: hand over the task now
//   ← TASK <task_id>   the task handed over
//   → STOP             stop the server now
//   ← STOPPED
//   → START            start the server again, on the same address
//   ← STARTED
//   → {"ok": true, …}  the report (last line); exit status 0
// On failure it prints what failed on stderr and exits 1.

import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

class Failure extends Error {}
const fail = (msg) => {
  throw new Failure(msg);
};

function parseArgs(argv) {
  const opts = { screenshot: "", "bind-token": "", operator: "", "password-operator": "", password: "", "question-shot": "", "offline-shot": "", question: "", answer: "", summary: "", timeout: "90", chromium: "/usr/bin/chromium" };
  let i = 0;
  for (; i < argv.length && argv[i].startsWith("--"); i += 2) {
    const name = argv[i].slice(2);
    if (!(name in opts) || i + 1 >= argv.length) usage(`bad option ${argv[i]}`);
    opts[name] = argv[i + 1];
  }
  if (i !== argv.length - 1) usage("want exactly one URL");
  opts.url = argv[i];
  const needs = opts["bind-token"] ? ["screenshot", "operator"] : ["screenshot", "question", "answer", "summary"];
  for (const need of needs) if (!opts[need]) usage(`--${need} is required`);
  return opts;
}

function usage(msg) {
  process.stderr.write(`monitor.mjs: ${msg}\nusage: node monitor.mjs --screenshot FILE --question T --answer T --summary T [--offline-shot FILE] [--timeout S] URL\n`);
  process.exit(2);
}

// The Go test's answers, line by line.
const stdin = createInterface({ input: process.stdin });
const lines = [];
let waiter = null;
stdin.on("line", (l) => {
  lines.push(l.trim());
  if (waiter) waiter();
});

async function ask(say, want) {
  process.stdout.write(say + "\n");
  for (;;) {
    const i = lines.findIndex((l) => l.startsWith(want));
    if (i >= 0) return lines.splice(i, 1)[0].slice(want.length).trim();
    await new Promise((resolve) => (waiter = resolve));
    waiter = null;
  }
}

const log = (...a) => process.stderr.write(`[${((Date.now() - t0) / 1000).toFixed(2)}s] ${a.join(" ")}\n`);
const t0 = Date.now();
const opts = parseArgs(process.argv.slice(2));
const deadline = setTimeout(() => {
  process.stderr.write(`monitor.mjs: FAIL: still running after ${opts.timeout}s\n`);
  process.exit(1);
}, Number(opts.timeout) * 1000);

let browser;
const report = { ok: false };
try {
  browser = await chromium.launch({ executablePath: opts.chromium, args: FLAGS, headless: true });
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  await (opts["bind-token"] ? runBind(page) : run(page));
  report.ok = true;
  report.seconds = (Date.now() - t0) / 1000;
  process.stdout.write(JSON.stringify(report) + "\n");
} catch (err) {
  process.stderr.write(`monitor.mjs: FAIL: ${err instanceof Failure ? err.message : err.stack || err}\n`);
  process.exitCode = 1;
} finally {
  clearTimeout(deadline);
  stdin.close();
  if (browser) await browser.close().catch(() => {});
}

async function run(page) {
  const errors = [];
  page.on("pageerror", (e) => errors.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    // Failed requests while the server is down are expected; anything else is not.
    if (m.type() === "error" && !/ERR_CONNECTION_REFUSED|ERR_EMPTY_RESPONSE|Failed to load resource/.test(m.text())) errors.push(`console error: ${m.text()}`);
  });
  let navigations = 0;
  page.on("framenavigated", (f) => f === page.mainFrame() && navigations++);
  const checkErrors = () => errors.length && fail(errors.join("\n"));

  // 1. The page comes up live, with nothing but the base task. Until the
  // task list has been read (held back here until checked), it says so:
  // "loading…", never "No tasks." next to the live badge.
  let releaseTasks;
  const tasksHeld = new Promise((r) => (releaseTasks = r));
  let heldOnce = false;
  await page.route("**/api/states?type=task", async (route) => {
    if (!heldOnce) {
      heldOnce = true;
      await tasksHeld;
    }
    await route.continue();
  });
  await page.goto(opts.url);
  await page.locator("#conn.live").waitFor({ timeout: 10000 });
  const before = (await page.locator("#tasks").textContent()).trim();
  releaseTasks();
  if (before !== "loading…") fail(`before the task list was read, the page said "${before}", want "loading…"`);
  await page.locator("#tasks .task.base").waitFor({ timeout: 10000 });
  const me = (await page.locator("#whoami b").textContent()).trim();
  if (!me) fail("the header names no operator");
  await page.evaluate(() => (window.__sameDocument = true));
  log("page live as operator", me);

  // 2. The task is handed over (by the Go test, over MCP); the page follows.
  const taskID = await ask("READY", "TASK");
  const task = page.locator(`#tasks .task[data-task-id="${taskID}"]`);
  await task.waitFor({ timeout: 10000 });
  report.task_seen_ms = Date.now() - t0;
  await page.locator(`#tasks .task.selected[data-task-id="${taskID}"]`).waitFor({ timeout: 5000 }).catch(() => fail("the new task was not selected by itself"));

  // Stages, agents and steps appear as the manager works: sample the
  // counts until alice's question is in the inbox.
  const urgent = page.locator("#inbox .inbox-entry.urgent.awaiting").filter({ hasText: opts.question });
  const samples = [];
  const counts = () =>
    page.evaluate(() => ({
      stages: document.querySelectorAll('#progress .stage:not([data-stage-id="no_relative"])').length,
      agents: new Set([...document.querySelectorAll("#progress .agent")].map((a) => a.dataset.agentId)).size,
      steps: document.querySelectorAll("#progress .step").length,
    }));
  for (;;) {
    const c = await counts();
    if (!samples.length || JSON.stringify(c) !== JSON.stringify(samples.at(-1))) samples.push(c);
    if ((await urgent.count()) > 0) break;
    if (Date.now() - t0 > (Number(opts.timeout) - 30) * 1000) fail(`alice's question never reached the inbox; counts seen: ${JSON.stringify(samples)}`);
    await page.waitForTimeout(50);
  }
  report.question_seen_ms = Date.now() - t0;
  report.progress_samples = samples.length;
  const last = await counts();
  if (last.stages < 2 || last.agents < 3 || last.steps < 5) fail(`progress shows ${JSON.stringify(last)}, want 2 stages, manager + alice + bob, steps`);
  const distinctSteps = new Set(samples.map((s) => s.steps)).size;
  if (distinctSteps < 3) fail(`the step count changed only ${distinctSteps - 1} time(s) while the task ran (${JSON.stringify(samples)}): the page did not follow live`);
  log(`progress followed live: ${samples.length} distinct views, last ${JSON.stringify(last)}`);

  // The question: urgent in the inbox, "@me" and urgent in the chat, a toast.
  const alice = await urgent.first().locator(".entry-head b").textContent();
  if (alice !== "alice") fail(`the urgent question comes from ${alice}, want alice`);
  const chatQ = page.locator("#chat .msg.to-me").filter({ hasText: opts.question });
  await chatQ.waitFor({ timeout: 5000 }).catch(() => fail("the question is not in the chat as a message to me"));
  if ((await chatQ.getAttribute("data-kind")) !== "urgent") fail("the question is not marked urgent in the chat");
  if ((await chatQ.locator(".at-me").textContent()) !== "@me") fail("the question has no @me badge in the chat");
  await page.locator(".toast").filter({ hasText: "alice" }).waitFor({ timeout: 5000 }).catch(() => fail("no urgent toast for alice's question"));
  const headUsage = await page.locator("#task-head .usage b").textContent();
  if (!headUsage || headUsage === "0") fail(`the task's token total reads ${headUsage}`);
  if (opts["question-shot"]) await page.screenshot({ path: opts["question-shot"], fullPage: true });

  // 3. The composer's @-mention offers the task's group (but me) and adds chips.
  const text = page.locator("#compose-text");
  await text.click();
  await text.pressSequentially("@");
  const offered = await page.locator("#mention-list .mention b").allTextContents();
  for (const want of ["@manager", "@alice", "@bob", "@all"]) if (!offered.includes(want)) fail(`the @ list offers ${offered}, want ${want} in it`);
  if (offered.includes("@" + me)) fail(`the @ list offers the operator itself (${offered})`);
  await text.pressSequentially("bo");
  const filtered = await page.locator("#mention-list .mention b").allTextContents();
  if (filtered.length !== 1 || filtered[0] !== "@bob") fail(`typing @bo lists ${filtered}, want only @bob`);
  await text.press("Enter");
  await page.locator('#receivers .chip:not(.default)').filter({ hasText: "@bob" }).waitFor({ timeout: 2000 });
  if ((await text.inputValue()) !== "") fail(`the mention left "${await text.inputValue()}" in the text`);
  await page.locator("#receivers .chip .chip-x").click();
  await page.locator("#receivers .chip.default").filter({ hasText: "@manager" }).waitFor({ timeout: 2000 });
  log("composer @-mention works");

  // 4. Answer from the inbox's reply box.
  const entry = urgent.first();
  const stepsBefore = await page.locator(`#progress .agent[data-agent-id] .step`).count();
  await entry.locator(".reply-box textarea").fill(opts.answer);
  await entry.locator(".reply-box button").click();
  report.answered_ms = Date.now() - t0;
  const mine = page.locator("#chat .msg.mine").filter({ hasText: opts.answer });
  await mine.waitFor({ timeout: 10000 }).catch(() => fail("the answer did not appear in the chat"));
  if ((await mine.locator(".body").textContent()) !== opts.answer) fail("the answer is not shown verbatim");
  if ((await mine.locator(".body *").count()) !== 0) fail("the answer's markup was rendered as HTML");
  await page.locator(".toast").waitFor({ state: "detached", timeout: 10000 }).catch(() => fail("the urgent toast stayed after the answer"));
  log("answered; the answer is in the chat");

  // 5. The agents react and the task finishes, all on the same page.
  await page.waitForFunction((n) => document.querySelectorAll("#progress .agent[data-agent-id] .step").length > n, stepsBefore, { timeout: 20000 })
    .catch(() => fail("no new step appeared after the answer"));
  await page.locator("#task-state").filter({ hasText: /^finished$/ }).waitFor({ state: "attached", timeout: 30000 })
    .catch(async () => fail(`the task did not finish on the page (state ${await page.locator("#task-state").textContent()})`));
  report.finished_ms = Date.now() - t0;
  await page.locator(`#tasks .task[data-task-id="${taskID}"][data-state="finished"]`).waitFor({ timeout: 5000 });
  const summary = await page.locator("#task-head .summary").textContent();
  if (!summary.includes(opts.summary)) fail(`the summary reads "${summary}", want "${opts.summary}"`);
  const stageStates = await page.locator('#progress .stage[data-state]').evaluateAll((els) => els.map((e) => e.dataset.state));
  if (stageStates.length !== 2 || stageStates.some((s) => s !== "finished")) fail(`stage states ${stageStates}, want 2 finished`);
  if (!(await page.locator("#composer").evaluate((f) => f.classList.contains("disabled")))) fail("the composer of a finished task is not read-only");
  if ((await page.locator("#inbox .inbox-entry.awaiting").count()) !== 0) fail("the inbox still has messages awaiting a reply");

  // A step's details.
  await page.locator('#progress .stage[data-state] .step[data-state="finished"]').first().click();
  const detail = await page.locator("#details").textContent();
  for (const want of ["executor", "prompt size", "result size", "tokens", "execute_result", "instruction_content", "text_content"]) {
    if (!detail.includes(want)) fail(`the step details lack ${want}`);
  }
  if (!(await page.evaluate(() => window.__sameDocument))) fail("the page was reloaded");
  if (navigations !== 1) fail(`the page navigated ${navigations} times, want 1 (no reloads)`);
  checkErrors();
  await page.screenshot({ path: opts.screenshot, fullPage: true });
  log("task finished live; screenshot written");

  // 6. The server goes away: a banner, then reconnection and fresh states.
  await ask("STOP", "STOPPED");
  await page.locator("#banner").waitFor({ state: "visible", timeout: 15000 }).catch(() => fail("no banner while the server is down"));
  const banner = await page.locator("#banner").textContent();
  if (!/unreachable/i.test(banner) || !/reconnecting/i.test(banner)) fail(`the banner says "${banner}"`);
  if (opts["offline-shot"]) await page.screenshot({ path: opts["offline-shot"], fullPage: true });
  await ask("START", "STARTED");
  const back = Date.now();
  await page.locator("#banner").waitFor({ state: "hidden", timeout: 15000 }).catch(() => fail("the banner stayed after the server came back"));
  await page.locator("#conn.live").waitFor({ timeout: 5000 });
  // A fresh server has a fresh MAS: the page must have re-read its states.
  await page.locator(`#tasks .task[data-task-id="${taskID}"]`).waitFor({ state: "detached", timeout: 10000 })
    .catch(() => fail("after reconnecting, the page still lists the old server's task: states were not re-read"));
  report.reconnect_ms = Date.now() - back;
  if (!(await page.evaluate(() => window.__sameDocument))) fail("the page was reloaded while reconnecting");
  checkErrors();
  log("reconnected and re-read the states");
}

// runBind: a server with tokens answers 401 until the page binds; the page
// asks for a token, refuses a wrong one, and goes live with the right one.
async function runBind(page) {
  const errors = [];
  page.on("pageerror", (e) => errors.push(`page error: ${e.message}`));
  await page.goto(opts.url);
  const dialog = page.locator("dialog#bind");
  await dialog.waitFor({ state: "visible", timeout: 10000 }).catch(() => fail("no bind dialog on a server that requires tokens"));
  if (await page.locator("#bind-cancel").isVisible()) fail("the bind dialog can be cancelled before any operator is bound");
  await page.locator("#conn.unbound").waitFor({ timeout: 5000 }).catch(() => fail("the status does not say the page is not bound"));

  await page.locator("#bind-token").fill("not-a-token-of-this-server");
  await page.locator("#bind-submit").click();
  await page.locator("#bind-error").filter({ hasText: "token" }).waitFor({ timeout: 5000 }).catch(() => fail("a wrong token shows no error"));
  if (!(await dialog.isVisible())) fail("the dialog closed on a wrong token");

  await page.locator("#bind-token").fill(opts["bind-token"]);
  await page.locator("#bind-submit").click();
  await dialog.waitFor({ state: "hidden", timeout: 5000 }).catch(() => fail("the dialog stayed open after a good token"));
  await page.locator("#conn.live").waitFor({ timeout: 10000 }).catch(() => fail("the page did not go live after binding"));
  await page.locator("#whoami b").filter({ hasText: opts.operator }).waitFor({ timeout: 5000 })
    .catch(() => fail(`the header does not name operator ${opts.operator}`));
  await page.locator("#tasks .task.base").waitFor({ timeout: 5000 }).catch(() => fail("no task listed after binding"));
  if ((await page.locator("input[type=password]").evaluateAll((els) => els.filter((e) => e.value).length)) !== 0) fail("the token stayed in the form");

  if (opts["password-operator"]) {
    // Switch operator: bind with a HumanAgent ID and its password.
    const name = opts["password-operator"];
    const id = await page.evaluate(async (name) => {
      const agents = await (await fetch("/api/states?type=agent")).json();
      const a = Object.values(agents).find((a) => a.name === name);
      return a ? a.agent_id : "";
    }, name);
    if (!id) fail(`no agent named ${name} in the states`);
    await page.locator("#switch-operator").click();
    await dialog.waitFor({ state: "visible", timeout: 5000 });
    if (!(await page.locator("#bind-cancel").isVisible())) fail("a bound page cannot cancel switching operators");
    await page.locator("#bind-id").fill(id);
    await page.locator("#bind-password").fill(opts.password + "-wrong");
    await page.locator("#bind-password-submit").click();
    await page.locator("#bind-error").filter({ hasText: "password" }).waitFor({ timeout: 5000 }).catch(() => fail("a wrong password shows no error"));
    await page.locator("#bind-password").fill(opts.password);
    await page.locator("#bind-password-submit").click();
    await dialog.waitFor({ state: "hidden", timeout: 5000 }).catch(() => fail("the dialog stayed open after a good password"));
    await page.locator("#whoami b").filter({ hasText: name }).waitFor({ timeout: 5000 }).catch(() => fail(`the header does not name operator ${name} after switching`));
    await page.locator("#conn.live").waitFor({ timeout: 10000 });
    log("switched operator with a password");
  }
  if (errors.length) fail(errors.join("\n"));
  await page.screenshot({ path: opts.screenshot, fullPage: true });
  log("bound with a token");
}
