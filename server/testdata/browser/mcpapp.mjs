#!/usr/bin/env node
// mcpapp.mjs drives mas-mcp's MCP App (the task view) in Debian's Chromium
// with playwright-core, inside a minimal MCP Apps host: mcpapp-host.js,
// built on ext-apps' AppBridge and the TypeScript SDK's client, served at
// URL/__host/ (by this script, through the browser's request routing, so
// the page and mas-mcp's /mcp share an origin). The host calls add_task,
// renders the UI resource the tool names and hands the view the result;
// the script then watches the task progress in the view (no reload),
// answers the agent's question from the view's reply box, waits for the
// task to finish and writes screenshots.
//
// Once the view shows the task, it prints SHOWN on stdout (the Go test
// then lets the fake LLM answer).
//
// Usage: node mcpapp.mjs [options] URL
//   --host-js FILE      the bundled host script (required)
//   --screenshot FILE   the PNG of the view once the task finished (required)
//   --question-shot FILE the PNG of the view when the question arrived
//   --question TEXT     the question the agent asks the operator (required)
//   --answer TEXT       what the operator answers (required)
//   --summary TEXT      the task summary expected at the end (required)
//   --timeout SECONDS   overall deadline (default 90)
//   --chromium PATH     the browser (default /usr/bin/chromium)
// Its last line on stdout is the report, {"ok": true, …}; on failure it says
// what failed on stderr and exits 1.

import { readFile } from "node:fs/promises";
import { chromium } from "playwright-core";

const FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"];
const APP_URI = "ui://mas-mcp/task-view.html";
const APP_MIME = "text/html;profile=mcp-app";

class Failure extends Error {}
const fail = (msg) => {
  throw new Failure(msg);
};

function parseArgs(argv) {
  const opts = { "host-js": "", screenshot: "", "question-shot": "", question: "", answer: "", summary: "", timeout: "90", chromium: "/usr/bin/chromium" };
  let i = 0;
  for (; i < argv.length && argv[i].startsWith("--"); i += 2) {
    const name = argv[i].slice(2);
    if (!(name in opts) || i + 1 >= argv.length) usage(`bad option ${argv[i]}`);
    opts[name] = argv[i + 1];
  }
  if (i !== argv.length - 1) usage("want exactly one URL");
  opts.url = argv[i].replace(/\/$/, "");
  for (const need of ["host-js", "screenshot", "question", "answer", "summary"]) if (!opts[need]) usage(`--${need} is required`);
  return opts;
}

function usage(msg) {
  process.stderr.write(`mcpapp.mjs: ${msg}\n`);
  process.exit(2);
}

const t0 = Date.now();
const log = (...a) => process.stderr.write(`[${((Date.now() - t0) / 1000).toFixed(2)}s] ${a.join(" ")}\n`);
const opts = parseArgs(process.argv.slice(2));
const deadline = setTimeout(() => {
  process.stderr.write(`mcpapp.mjs: FAIL: still running after ${opts.timeout}s\n`);
  process.exit(1);
}, Number(opts.timeout) * 1000);

const HOST_PAGE = `<!doctype html><html><head><meta charset="utf-8"><title>MCP Apps test host</title>
<style>body{font:14px system-ui;margin:16px;background:#eef0f3}#frame iframe{width:760px;min-height:200px;border:1px solid #c8ccd2;border-radius:8px;background:#fff}</style>
</head><body><p id="ready">loading host…</p><div id="frame"></div><script src="/__host/host.js"></script></body></html>`;

let browser;
const report = { ok: false };
try {
  const hostJS = await readFile(opts["host-js"], "utf8");
  browser = await chromium.launch({ executablePath: opts.chromium, args: FLAGS, headless: true });
  const page = await browser.newPage({ viewport: { width: 820, height: 900 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(`console error: ${m.text()}`);
    else if (m.text().startsWith("host: ")) log(m.text());
  });
  await page.route(`${opts.url}/__host/`, (route) => route.fulfill({ contentType: "text/html", body: HOST_PAGE }));
  await page.route(`${opts.url}/__host/host.js`, (route) => route.fulfill({ contentType: "text/javascript", body: hostJS }));
  await page.goto(`${opts.url}/__host/`);
  await page.locator("#ready", { hasText: "host ready" }).waitFor({ timeout: 10000 });

  // 1. The host hands over the task through add_task and renders its view.
  const opened = await page.evaluate(
    ([name, intention]) => window.host.open("add_task", { task_name: name, task_intention: intention }),
    ["report", "Research a topic and write a report."],
  );
  if (opened.uri !== APP_URI) fail(`add_task names the UI resource ${opened.uri}, want ${APP_URI}`);
  if (opened.mimeType !== APP_MIME) fail(`the UI resource's mimeType is ${opened.mimeType}, want ${APP_MIME}`);
  const taskID = opened.result && opened.result.task_id;
  if (!taskID) fail(`add_task returned no task_id: ${JSON.stringify(opened.result)}`);
  report.task_id = taskID;
  log("view rendered for task", taskID);
  const view = page.frameLocator("#view");
  await view.locator("#title", { hasText: "report" }).waitFor({ timeout: 15000 });
  // Every view the page shows from now on is noted, in the page, as
  // "stages/steps" (the driver itself may be slower than the view).
  const frame = page.frames().find((f) => f !== page.mainFrame());
  if (!frame) fail("the view's frame is missing");
  await frame.evaluate(() => {
    const views = (window.__views = []);
    const note = () => {
      const v = `${document.querySelectorAll("#stages li[data-stage-id]").length}/${document.querySelectorAll(".steps li").length}`;
      if (views[views.length - 1] !== v) views.push(v);
    };
    note();
    new MutationObserver(note).observe(document.getElementById("view"), { childList: true, subtree: true });
    // Every render sets the title: __renders counts them.
    window.__renders = 0;
    new MutationObserver(() => window.__renders++).observe(document.getElementById("title"), { childList: true });
  });
  // The Go test holds the fake LLM back until now: every step of the task
  // is made while the view is up.
  process.stdout.write("SHOWN\n");

  // 2. The task progresses in the view, live (no reload), until the
  // agent's question arrives.
  const question = view.locator(".question", { hasText: opts.question });
  await question.waitFor({ timeout: 60000 }).catch(() => fail("the agent's question never showed in the view"));
  const samples = await frame.evaluate(() => window.__views);
  report.progress_samples = samples.length;
  report.question_seen_ms = Date.now() - t0;
  if (samples.length < 3) fail(`the view changed only ${samples.length - 1} time(s) before the question (${samples.join(", ")}): it did not follow the task live; it says "${await view.locator("#live").textContent()}", "${await view.locator("#status").textContent()}"`);
  if ((await view.locator("#stages li[data-stage-id]").count()) === 0) fail("the question arrived but the view shows no stage");
  log(`progress followed live: ${samples.join(" → ")}`);
  if (opts["question-shot"]) await page.screenshot({ path: opts["question-shot"], fullPage: true });

  // 3. The operator answers inside the view, with a click the view
  // re-renders under, as when an update of the task lands between the
  // mouse going down on "Send reply" and coming up: here the host hands
  // the view show_task's result in between. Chromium drops the click when
  // the pressed element leaves the document meanwhile, even if it is put
  // straight back, so the view must leave an open question's element in
  // place.
  await question.locator("textarea").fill(opts.answer);
  await question.locator("button.reply").hover();
  await page.mouse.down();
  const renders = await frame.evaluate(() => window.__renders);
  await page.evaluate((id) => window.host.show(id), taskID);
  await frame.waitForFunction((n) => window.__renders > n, renders, { timeout: 15000 }).catch(() => fail("the view did not render the task the host showed it"));
  await page.mouse.up();
  await question.waitFor({ state: "detached", timeout: 15000 }).catch(async () => {
    // What the view said (its status line: the reply's outcome, "Write an
    // answer first." when the box was empty) and what is left in the box.
    const said = await view.locator("#status").textContent().catch((e) => `(unreadable: ${e.message})`);
    const box = await question.locator("textarea").inputValue().catch((e) => `(unreadable: ${e.message})`);
    fail(`the question stayed open after the reply was sent: the view says "${said}", "${await view.locator("#live").textContent()}"; its reply box holds "${box}"`);
  });
  report.answered_ms = Date.now() - t0;
  log("answered from the view");

  // 4. The task finishes, in the view.
  await view.locator("#state[data-state=finished]").waitFor({ timeout: 60000 }).catch(async () => {
    fail(`the task did not finish in the view (state ${await view.locator("#state").textContent()})`);
  });
  const summary = await view.locator("#summary").textContent();
  if (!summary.includes(opts.summary)) fail(`the view's summary is "${summary}", want "${opts.summary}"`);
  const agents = await view.locator(".agent").count();
  if (agents === 0) fail("the finished view shows no agent");
  report.finished_ms = Date.now() - t0;
  await page.screenshot({ path: opts.screenshot, fullPage: true });
  if (errors.length) fail(errors.join("\n"));
  report.ok = true;
  report.seconds = (Date.now() - t0) / 1000;
  process.stdout.write(JSON.stringify(report) + "\n");
} catch (err) {
  process.stderr.write(`mcpapp.mjs: FAIL: ${err instanceof Failure ? err.message : err.stack || err}\n`);
  process.exitCode = 1;
} finally {
  clearTimeout(deadline);
  if (browser) await browser.close().catch(() => {});
}
