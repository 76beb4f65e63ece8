#!/usr/bin/env node
// build.mjs bundles the task view (src/) into one self-contained HTML file,
// dist/task-view.html, which the Go server embeds (server/app.go). The
// output depends only on src/ and the versions in package-lock.json: make
// app rebuilds it; server/app_test.go rebuilds it into a temporary file and
// compares it with the committed one.
//
// Usage: node build.mjs [--out FILE]
//        node build.mjs --host ENTRY --out FILE   (the browser test's host page
//        script: ENTRY bundled with this directory's packages, for Chromium)

import { readFile, writeFile, mkdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const opt = (name, def) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : def;
};

async function bundle(entry) {
  const res = await build({
    entryPoints: [entry],
    bundle: true,
    format: "iife",
    platform: "browser",
    target: "es2022",
    minify: true,
    legalComments: "none",
    charset: "utf8",
    write: false,
    nodePaths: [join(here, "node_modules")],
    logLevel: "warning",
  });
  return res.outputFiles[0].text;
}

const host = opt("--host", "");
if (host) {
  const out = opt("--out", "");
  if (!out) throw new Error("--host needs --out");
  await writeFile(out, await bundle(host));
} else {
  const out = opt("--out", join(here, "dist", "task-view.html"));
  let js = await bundle(join(here, "src", "task-view.js"));
  // Inline in a <script>: no "</script" or "<!--" may appear in it.
  js = js.replaceAll("</script", "<\\/script");
  if (js.includes("<!--")) throw new Error("the bundle contains <!--, which an inline script may not");
  const css = await readFile(join(here, "src", "task-view.css"), "utf8");
  const page = await readFile(join(here, "src", "task-view.html"), "utf8");
  if (!page.includes("/*STYLE*/") || !page.includes("/*SCRIPT*/")) throw new Error("src/task-view.html lacks its placeholders");
  const html = page.replace("/*STYLE*/", () => css.trim()).replace("/*SCRIPT*/", () => js.trim());
  await mkdir(dirname(out), { recursive: true });
  await writeFile(out, html);
}
