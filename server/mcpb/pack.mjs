#!/usr/bin/env node
// pack.mjs builds mas-mcp's MCP Bundle (.mcpb) for one-click install in
// Claude Desktop: manifest.json (this directory's, with the version and the
// platform of the binary filled in) and the binary as server/mas-mcp, packed
// and validated by @anthropic-ai/mcpb (pinned in package-lock.json).
// `make bundle` runs it.
//
// Usage: node pack.mjs --binary FILE --out FILE.mcpb [--version V] [--goos OS]
//   --version  the module version (git describe); the manifest needs semver:
//              v1.2.3 → 1.2.3, anything else → 0.0.0-dev.<it>
//   --goos     the binary's GOOS (default: this machine's): darwin, linux, windows

import { execFileSync } from "node:child_process";
import { copyFileSync, chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const opt = (name, def) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : def;
};
const binary = opt("--binary", "");
const out = opt("--out", "");
if (!binary || !out) {
  process.stderr.write("usage: node pack.mjs --binary FILE --out FILE.mcpb [--version V] [--goos OS]\n");
  process.exit(2);
}
const goos = opt("--goos", { win32: "windows" }[process.platform] || process.platform);
const platform = { windows: "win32", darwin: "darwin", linux: "linux" }[goos];
if (!platform) throw new Error(`--goos ${goos}: Claude Desktop runs on darwin, linux and windows only`);

/** semver turns git describe's output into the semver the manifest needs. */
export function semver(v) {
  const m = /^v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)$/.exec(v || "");
  if (m) return m[1];
  const tag = (v || "unknown").replace(/^v/, "").replace(/[^0-9A-Za-z-]+/g, ".").replace(/^\.+|\.+$/g, "");
  return `0.0.0-dev.${tag || "unknown"}`;
}

const manifest = JSON.parse(readFileSync(join(here, "manifest.json"), "utf8"));
manifest.version = semver(opt("--version", ""));
manifest.compatibility = { ...manifest.compatibility, platforms: [platform] };
const exe = platform === "win32" ? "server/mas-mcp.exe" : "server/mas-mcp";
manifest.server.entry_point = exe;
manifest.server.mcp_config.command = "${__dirname}/" + exe;

const stage = mkdtempSync(join(tmpdir(), "mas-mcp-bundle-"));
try {
  mkdirSync(join(stage, "server"));
  copyFileSync(binary, join(stage, exe));
  chmodSync(join(stage, exe), 0o755);
  writeFileSync(join(stage, "manifest.json"), JSON.stringify(manifest, null, 2) + "\n");
  const cli = join(here, "node_modules", "@anthropic-ai", "mcpb", "dist", "cli", "cli.js");
  execFileSync(process.execPath, [cli, "validate", join(stage, "manifest.json")], { stdio: "inherit" });
  execFileSync(process.execPath, [cli, "pack", stage, resolve(out)], { stdio: "inherit" });
} finally {
  rmSync(stage, { recursive: true, force: true });
}
