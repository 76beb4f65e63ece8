#!/usr/bin/env node
// controls.mjs drives the monitor page's operator controls in Debian's
// Chromium with playwright-core: on a task the Go test set up (alice waits
// for the operator's answer), it pauses and resumes the task and alice,
// approves a tool call's question with a note from the inbox's button,
// and interrupts alice during a slow LLM call with an instruction. After
// each click it waits for the page to show the outcome (which arrives as
// an event), then lets the Go test check the engine.
//
// Usage: node controls.mjs --task ID --agent ID --instruction TEXT
//          [--screenshot FILE] [--timeout SECONDS] [--chromium PATH] URL
//
// It talks with the Go test over stdin/stdout, one line each: it says
// what it did (TASK_PAUSED, TASK_RESUMED, AGENT_PAUSED, AGENT_RESUMED,
// ASK, APPROVED, SLOW, INTERRUPTED) and waits for the test's "OK" (after
// ASK: "ASKED"; after SLOW: "RUNNING"); the last line is {"ok": true}.

import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

const FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];

class Failure extends Error {}
const fail = (msg) => {
  throw new Failure(msg);
};

const opts = { task: "", agent: "", instruction: "", screenshot: "", timeout: "90", chromium: "/usr/bin/chromium" };
const argv = process.argv.slice(2);
let i = 0;
for (; i < argv.length && argv[i].startsWith("--"); i += 2) {
  const name = argv[i].slice(2);
  if (!(name in opts) || i + 1 >= argv.length) {
    process.stderr.write(`controls.mjs: bad option ${argv[i]}\n`);
    process.exit(2);
  }
  opts[name] = argv[i + 1];
}
if (i !== argv.length - 1 || !opts.task || !opts.agent || !opts.instruction) {
  process.stderr.write("usage: node controls.mjs --task ID --agent ID --instruction TEXT [--screenshot FILE] URL\n");
  process.exit(2);
}
opts.url = argv[i];

const stdin = createInterface({ input: process.stdin });
const lines = [];
let waiter = null;
stdin.on("line", (l) => {
  lines.push(l.trim());
  if (waiter) waiter();
});

// say tells the Go test what happened and waits for its answer.
async function say(what, want = "OK") {
  process.stdout.write(what + "\n");
  for (;;) {
    const i = lines.findIndex((l) => l.startsWith(want));
    if (i >= 0) return lines.splice(i, 1)[0].slice(want.length).trim();
    await new Promise((resolve) => (waiter = resolve));
    waiter = null;
  }
}

const t0 = Date.now();
const log = (...a) => process.stderr.write(`[${((Date.now() - t0) / 1000).toFixed(2)}s] ${a.join(" ")}\n`);
const deadline = setTimeout(() => {
  process.stderr.write(`controls.mjs: FAIL: still running after ${opts.timeout}s\n`);
  process.exit(1);
}, Number(opts.timeout) * 1000);

let browser;
try {
  browser = await chromium.launch({ executablePath: opts.chromium, args: FLAGS, headless: true });
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  await run(page);
  process.stdout.write(JSON.stringify({ ok: true, seconds: (Date.now() - t0) / 1000 }) + "\n");
} catch (err) {
  process.stderr.write(`controls.mjs: FAIL: ${err instanceof Failure ? err.message : err.stack || err}\n`);
  process.exitCode = 1;
} finally {
  clearTimeout(deadline);
  stdin.close();
  if (browser) await browser.close().catch(() => {});
}

async function run(page) {
  const errors = [];
  page.on("pageerror", (e) => errors.push(`page error: ${e.message}`));
  page.on("console", (m) => { if (m.type() === "warning" || m.type() === "error") log(`console: ${m.text()}`); });
  const shown = (loc, what) => loc.first().waitFor({ timeout: 10000 }).catch(() => fail(`the page does not show ${what}`));
  const gone = (loc, what) => loc.first().waitFor({ state: "detached", timeout: 10000 }).catch(() => fail(`the page still shows ${what}`));

  await page.goto(opts.url);
  await page.locator("#conn.live").waitFor({ timeout: 10000 });
  await page.locator(`#tasks .task[data-task-id="${opts.task}"]`).click();
  await page.locator(`#tasks .task.selected[data-task-id="${opts.task}"]`).waitFor({ timeout: 5000 });
  log("task selected");

  // The task: pause, see it paused, resume.
  const head = page.locator("#task-head");
  await head.locator('[data-control="pause_task"]').click();
  await shown(head.locator('.pill.paused[data-paused="task"]'), "the task paused");
  await shown(head.locator('[data-control="resume_task"]'), "a resume button");
  await say("TASK_PAUSED");
  await head.locator('[data-control="resume_task"]').click();
  await gone(head.locator('.pill.paused[data-paused="task"]'), "the task paused after resuming");
  await say("TASK_RESUMED");
  log("task paused and resumed");

  // alice: pause, see her paused, resume. The click straddles a re-render
  // of the page, as it does on a busy task: between mousedown and mouseup
  // another control's event arrives (the task paused through the API) and
  // the page renders it. The button pressed must still be the one released
  // on, or the click is lost.
  const agent = page.locator(`#progress .agent[data-agent-id="${opts.agent}"]`);
  const taskPaused = head.locator('.pill.paused[data-paused="task"]');
  const control = (action) => page.evaluate(async ([action, task]) => {
    const res = await fetch("/api/control", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ action, task_id: task }), credentials: "same-origin" });
    if (!res.ok) throw new Error(`${action}: ${res.status} ${await res.text()}`);
  }, [action, opts.task]);
  const pauseAlice = agent.locator('[data-control="pause_agent"]:visible').first();
  await pauseAlice.hover();
  await page.mouse.down();
  await control("pause_task");
  await shown(taskPaused, "the task paused (through the API, the mouse held down on alice's pause button)");
  // The render may have moved the button (alice now reads paused, a pill
  // before it): the pointer follows it, as a user's would.
  const box = await pauseAlice.boundingBox();
  if (!box) fail("alice's pause button is gone after the re-render");
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  await page.mouse.up();
  await shown(agent.locator('.pill.paused[data-paused="agent"]'), "alice paused, though the page re-rendered while her pause button was held down");
  await control("resume_task");
  await gone(taskPaused, "the task paused after resuming it through the API");
  await say("AGENT_PAUSED");
  await agent.locator('[data-control="resume_agent"]:visible').first().click();
  await gone(agent.locator('.pill.paused[data-paused="agent"]'), "alice paused after resuming");
  await say("AGENT_RESUMED");
  log("agent paused and resumed");

  // An approval question: the inbox shows approve/deny; approve with a note.
  await say("ASK", "ASKED");
  const entry = page.locator("#inbox .inbox-entry.awaiting").filter({ has: page.locator('[data-decision="approve"]') });
  await shown(entry, "the approval question with its buttons");
  await entry.locator(".approval-note").fill("looks fine");
  await entry.locator('[data-decision="approve"]').click();
  await shown(page.locator("#control-status.ok").filter({ hasText: "Approved" }), "the approval confirmed");
  await say("APPROVED");
  log("approved");

  // Interrupt alice during a slow LLM call; the step shows interrupted.
  await say("SLOW", "RUNNING");
  page.once("dialog", (d) => d.accept(opts.instruction));
  await agent.locator('[data-control="interrupt"]:visible').first().click();
  // (in whichever block holds it, folded or not)
  await agent.locator(".step .pill.interrupted").first().waitFor({ state: "attached", timeout: 10000 })
    .catch(async () => fail(`the page does not show the interrupted step; status: ${await page.locator("#control-status").textContent().catch(() => "none")}; alice's steps: ${JSON.stringify(await agent.locator(".step").evaluateAll((els) => els.map((e) => e.className + " " + e.textContent)))}; page errors: ${errors.join(" | ") || "none"}; server: ${JSON.stringify(await page.evaluate(async (a) => Object.values(await (await fetch("/api/states?type=step", { credentials: "same-origin" })).json()).filter((s) => s.agent_id === a).map((s) => s.execution_state + " " + s.executor + " " + s.task_id.slice(0, 8) + "/" + s.stage_id.slice(0, 8)), opts.agent))}`));
  await say("INTERRUPTED");
  log("interrupted");
  if (opts.screenshot) await page.screenshot({ path: opts.screenshot, fullPage: true });
  if (errors.length) fail(errors.join("\n"));
}
