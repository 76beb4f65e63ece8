#!/usr/bin/env node
// morph.mjs checks the monitor's morph (web/dom.js) in Chromium: on
// thousands of random trees, morphing the children of an element into new
// ones leaves exactly what fill (a plain replacement) leaves, and a kept
// element (same tag and keys, nothing before it changed) stays the same
// node. Prints {"ok": true, "cases": N} or fails with the first mismatch.
//
// Usage: node morph.mjs --dom PATH [--chromium PATH] [--cases N]

import { readFileSync } from "node:fs";
import { chromium } from "playwright-core";

const opts = { dom: "", chromium: "/usr/bin/chromium", cases: "3000" };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) opts[argv[i].replace(/^--/, "")] = argv[i + 1];

const PAGE = `<!doctype html><script type="module">
import { h, fill, morph } from "./dom.js";
let seed = 7;
const rnd = (n) => ((seed = (seed * 1103515245 + 12345) % 2147483648), seed % n);
const tags = ["div", "span", "li", "b", "details", "textarea"];
const classes = ["", "pill", "pill paused", "step st-running", "step st-failed", "controls"];
function tree(depth) {
  const tag = tags[rnd(tags.length)];
  const attrs = { class: classes[rnd(classes.length)] || undefined, title: rnd(2) ? "t" + rnd(3) : undefined };
  if (rnd(3) === 0) attrs["data-step-id"] = "s" + rnd(4);
  if (tag === "details") attrs.open = rnd(2) === 0;
  if (rnd(4) === 0) attrs.onclick = () => {};
  const kids = [];
  if (tag !== "textarea" && depth < 3) for (let n = rnd(4); n > 0; n--) kids.push(rnd(4) === 0 ? "x" + rnd(3) : tree(depth + 1));
  return h(tag, attrs, ...kids);
}
const list = () => Array.from({ length: rnd(6) }, () => tree(0));
let bad = "", cases = 0;
for (let i = 0; i < ${Number(opts.cases)} && !bad; i++, cases++) {
  const before = list(), after = list();
  const want = fill(document.createElement("div"), ...after.map((x) => x.cloneNode(true)));
  const got = fill(document.createElement("div"), ...before);
  const first = got.firstChild;
  const keepFirst = first && after.length && first.nodeType === 1 && first.tagName === after[0].tagName &&
    first.tagName !== "TEXTAREA" && first.className.split(" ")[0] === after[0].className.split(" ")[0] &&
    first.getAttribute("data-step-id") === after[0].getAttribute("data-step-id");
  morph(got, ...after);
  if (got.innerHTML !== want.innerHTML) bad = "case " + i + ": morph left\\n  " + got.innerHTML + "\\nfill leaves\\n  " + want.innerHTML;
  else if (keepFirst && got.firstChild !== first) bad = "case " + i + ": the first child matched its replacement but was not kept: " + want.innerHTML;
}
window.result = { ok: !bad, cases, bad };
</script>`;

const browser = await chromium.launch({ executablePath: opts.chromium, args: ["--headless", "--no-sandbox", "--disable-gpu"], headless: true });
try {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.route("http://morph.test/dom.js", (r) => r.fulfill({ contentType: "text/javascript", body: readFileSync(opts.dom, "utf8") }));
  await page.route("http://morph.test/", (r) => r.fulfill({ contentType: "text/html", body: PAGE }));
  await page.goto("http://morph.test/");
  await page.waitForFunction(() => window.result || null, null, { timeout: 60000 }).catch(() => {});
  const result = (await page.evaluate(() => window.result)) || { ok: false, bad: "no result; page errors: " + errors.join(" | ") };
  process.stdout.write(JSON.stringify(result) + "\n");
  if (!result.ok) process.exitCode = 1;
} finally {
  await browser.close();
}
