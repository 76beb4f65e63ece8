#!/usr/bin/env node
// operator.mjs plays the operator of mas-mcp with the official TypeScript
// MCP SDK (@modelcontextprotocol/sdk, pinned in package.json) over a real
// transport: it hands over a task, waits for the scripted agent's question
// (internal/scripted: AskOperator), answers it and follows the task to its
// end, checking what a real MCP host sees on the way.
//
// Usage:
//   node operator.mjs [options] stdio COMMAND [ARG...]
//   node operator.mjs [options] http  http://127.0.0.1:PORT/mcp
//   node operator.mjs [options] sse   http://127.0.0.1:PORT/sse
//
// Options (before the transport):
//   --timeout SECONDS     overall deadline of the run (default 60)
//   --question TEXT       the question the agent asks (default: scripted.OperatorQuestion)
//   --summary TEXT        the task summary expected (default: scripted.TaskSummary)
//   --answer TEXT         what the operator answers (default: ANSWER below)
//   --report FILE         write the JSON report there instead of stdout
//
// For stdio, the spawned server gets the SDK's default environment (PATH,
// HOME, …) plus every variable of ours whose name starts with OPENAI_ or
// MAS_ (the fake LLM's URL and key, the model); its stderr is ours.
//
// Exit status 0 with a one-line JSON report, or 1 with what failed on stderr.

import { writeFileSync } from "node:fs";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  LoggingMessageNotificationSchema,
  ResourceListChangedNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const QUESTION = "QUESTION for the operator: which format should the report use?";
const SUMMARY = "Both stages done: facts collected and report written.";
const ANSWER = "Use markdown with one section per finding.";

const TOOLS = [
  "add_task",
  "send_message",
  "ask_info",
  "get_inbox",
  "answer_approval",
  "wait_for_updates",
  "manage_task",
  "manage_agent",
  "read_resource",
];
const RESOURCES = ["mas://tasks", "mas://agents", "mas://catalog"];
const TEMPLATES = [
  "mas://tasks/{task_id}",
  "mas://tasks/{task_id}/stages/{stage_id}",
  "mas://tasks/{task_id}/conversation",
  "mas://agents/{agent_id}",
  "mas://agents/{agent_id}/steps",
  "mas://operators/{agent_id}/inbox",
];

class Failure extends Error {}

function fail(msg) {
  throw new Failure(msg);
}

function usage(msg) {
  process.stderr.write(
    `operator.mjs: ${msg}\nusage: node operator.mjs [--timeout S] [--question T] [--summary T] [--answer T] [--report FILE] (stdio COMMAND [ARG...] | http URL | sse URL)\n`,
  );
  process.exit(2);
}

function parseArgs(argv) {
  const opts = { timeout: 60, question: QUESTION, summary: SUMMARY, answer: ANSWER, report: "" };
  let i = 0;
  for (; i < argv.length && argv[i].startsWith("--"); i += 2) {
    const name = argv[i].slice(2);
    if (!(name in opts)) usage(`unknown option ${argv[i]}`);
    if (i + 1 >= argv.length) usage(`option ${argv[i]} needs a value`);
    opts[name] = name === "timeout" ? Number(argv[i + 1]) : argv[i + 1];
  }
  if (!(opts.timeout > 0)) usage("--timeout must be a positive number of seconds");
  const [transport, ...target] = argv.slice(i);
  if (!["stdio", "http", "sse"].includes(transport)) usage(`transport ${JSON.stringify(transport)}: want stdio, http or sse`);
  if (target.length === 0) usage(`${transport}: missing target`);
  if (transport !== "stdio" && target.length !== 1) usage(`${transport}: want exactly one URL`);
  return { ...opts, transport, target };
}

function makeTransport(kind, target) {
  switch (kind) {
    case "stdio": {
      const env = {};
      for (const [k, v] of Object.entries(process.env)) {
        if (k.startsWith("OPENAI_") || k.startsWith("MAS_")) env[k] = v;
      }
      return new StdioClientTransport({ command: target[0], args: target.slice(1), env, stderr: "inherit" });
    }
    case "http":
      return new StreamableHTTPClientTransport(new URL(target[0]));
    case "sse":
      return new SSEClientTransport(new URL(target[0]));
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// structured returns a tool result's structuredContent, failing on isError.
function structured(name, res) {
  if (res.isError) {
    fail(`${name}: tool error: ${(res.content ?? []).map((c) => c.text ?? "").join(" ")}`);
  }
  if (res.structuredContent === undefined) fail(`${name}: no structuredContent in ${JSON.stringify(res)}`);
  return res.structuredContent;
}

// readJSON reads a resource and parses its one JSON text.
async function readJSON(client, uri) {
  const res = await client.readResource({ uri });
  const c = res.contents?.[0];
  if (!c || c.uri !== uri || typeof c.text !== "string") fail(`read ${uri}: unexpected contents ${JSON.stringify(res)}`);
  if (c.mimeType !== "application/json") fail(`read ${uri}: mimeType ${c.mimeType}, want application/json`);
  return JSON.parse(c.text);
}

// listAll follows nextCursor through a paginated list.
async function listAll(list, key) {
  const out = [];
  let cursor;
  do {
    const page = await list(cursor === undefined ? {} : { cursor });
    out.push(...page[key]);
    cursor = page.nextCursor;
  } while (cursor);
  return out;
}

// listToolNames lists the tools with the SDK's Client.listTools, which
// validates the result against the SDK's Tool schema. Should that reject
// the list, it is recorded (report: strict_tools_list_error) and the list
// is fetched again as a lenient host would (the MCP Inspector does): the
// same tools/list request, its result taken as it is. Protocol.request
// accepts any schema object with safeParse.
async function listToolNames(client, counts) {
  try {
    return (await listAll((p) => client.listTools(p), "tools")).map((t) => t.name);
  } catch (err) {
    if (!Array.isArray(err?.issues)) throw err;
    const lenient = { safeParse: (data) => ({ success: true, data }) };
    const tools = await listAll((p) => client.request({ method: "tools/list", params: p }, lenient), "tools");
    counts.strictToolsList = err.issues
      .map((i) => {
        const path = i.path.map((x) => (typeof x === "number" ? `[${x}]` : `.${x}`)).join("");
        const tool = i.path[0] === "tools" ? tools[i.path[1]]?.name : undefined;
        return `${path.replace(/^\./, "")}${tool ? ` (${tool})` : ""}: ${i.message}`;
      })
      .join("; ");
    return tools.map((t) => t.name);
  }
}

function missing(want, got) {
  return want.filter((w) => !got.includes(w));
}

async function run(opts, deadline, client, counts) {
  const left = () => deadline - Date.now();
  const checkDeadline = (what) => {
    if (left() <= 0) fail(`timed out after ${opts.timeout}s ${what}`);
  };

  const server = client.getServerVersion();
  if (server?.name !== "mas-mcp") fail(`server name ${JSON.stringify(server?.name)}, want mas-mcp`);
  const caps = client.getServerCapabilities() ?? {};
  if (!caps.resources?.subscribe) fail(`server capabilities ${JSON.stringify(caps)}: resources.subscribe missing`);

  const tools = await listToolNames(client, counts);
  if (missing(TOOLS, tools).length) fail(`tools/list lacks ${missing(TOOLS, tools)} (got ${tools})`);
  const resources = (await listAll((p) => client.listResources(p), "resources")).map((r) => r.uri);
  if (missing(RESOURCES, resources).length) fail(`resources/list lacks ${missing(RESOURCES, resources)} (got ${resources})`);
  const templates = (await listAll((p) => client.listResourceTemplates(p), "resourceTemplates")).map((t) => t.uriTemplate);
  if (missing(TEMPLATES, templates).length) fail(`resources/templates/list lacks ${missing(TEMPLATES, templates)} (got ${templates})`);

  await client.setLoggingLevel("info");

  const added = structured(
    "add_task",
    await client.callTool({
      name: "add_task",
      arguments: { task_name: "report", task_intention: "Research a topic and write a report." },
    }),
  );
  const taskID = added.task_id;
  if (!taskID || added.resource_uri !== `mas://tasks/${taskID}`) fail(`add_task returned ${JSON.stringify(added)}`);
  const taskURI = added.resource_uri;
  counts.taskURI = taskURI;
  await client.subscribeResource({ uri: taskURI });

  // Wait for the agent's question, following the MAS with wait_for_updates.
  let question;
  let cursor = 0;
  let polls = 0;
  while (!question) {
    checkDeadline("waiting for the agent's question in get_inbox");
    const inbox = structured(
      "get_inbox",
      await client.callTool({ name: "get_inbox", arguments: { only_awaiting_reply: true } }),
    );
    polls++;
    question = inbox.messages.find((m) => m.content === opts.question);
    if (question) break;
    const timeout = Math.max(1, Math.min(2, Math.floor(left() / 1000)));
    const w = structured(
      "wait_for_updates",
      await client.callTool(
        { name: "wait_for_updates", arguments: { cursor, timeout_seconds: timeout } },
        undefined,
        { onprogress: () => counts.progress++ },
      ),
    );
    if (typeof w.cursor !== "number") fail(`wait_for_updates returned ${JSON.stringify(w)}`);
    cursor = w.cursor;
  }
  if (!question.waiting || !question.awaiting_reply || question.task_id !== taskID) {
    fail(`question ${JSON.stringify(question)}: want a waiting message of task ${taskID} awaiting a reply`);
  }

  const sent = structured(
    "send_message",
    await client.callTool({
      name: "send_message",
      arguments: { task_id: taskID, receiver: [question.sender_id], content: opts.answer },
    }),
  );
  if (sent.messages?.length !== 1 || !sent.messages[0].answers_waiting_message) {
    fail(`send_message returned ${JSON.stringify(sent)}: want one message answering the waiting question`);
  }

  // The task runs to its end: follow it with wait_for_updates and re-read
  // its resource (over read_resource, the tool, and resources/read).
  let task;
  for (let i = 0; ; i++) {
    checkDeadline("waiting for the task to finish");
    task =
      i % 2 === 0
        ? structured("read_resource", await client.callTool({ name: "read_resource", arguments: { uri: taskURI } })).document
        : await readJSON(client, taskURI);
    if (task.execution_state === "finished") break;
    if (task.execution_state === "failed") fail(`task failed: ${JSON.stringify(task)}`);
    const w = structured(
      "wait_for_updates",
      await client.callTool({
        name: "wait_for_updates",
        arguments: { cursor, task_id: taskID, timeout_seconds: Math.max(1, Math.min(2, Math.floor(left() / 1000))) },
      }),
    );
    cursor = w.cursor;
  }

  const list = await readJSON(client, "mas://tasks");
  const brief = list.find((t) => t.task_id === taskID);
  if (!brief || brief.execution_state !== "finished" || brief.stages !== 2) {
    fail(`mas://tasks entry of ${taskID}: ${JSON.stringify(brief)}, want finished with 2 stages`);
  }
  task = await readJSON(client, taskURI);
  const stages = task.stage_list ?? [];
  if (stages.length !== 2 || stages.some((s) => s.execution_state !== "finished")) {
    fail(`stages ${JSON.stringify(stages.map((s) => s.execution_state))}: want 2, both finished`);
  }
  if (task.task_summary !== opts.summary) fail(`task_summary ${JSON.stringify(task.task_summary)}, want ${JSON.stringify(opts.summary)}`);
  const conv = await readJSON(client, task.conversation_uri ?? `${taskURI}/conversation`);
  const answered = conv.messages.find((m) => m.message === opts.answer && m.receiver?.includes(question.sender_id));
  if (!answered) fail(`the conversation of ${taskID} (${conv.messages.length} messages) lacks the operator's answer`);

  // Notifications are sent as the MAS changes; give the last ones a moment.
  const settle = Date.now() + 2000;
  while (counts.updatedTask === 0 && Date.now() < settle) await sleep(50);
  if (counts.updatedTask === 0) fail(`no notifications/resources/updated for ${taskURI} (${counts.updated} for other URIs)`);
  if (counts.logging === 0) fail("no notifications/message (logging) of the agents' steps");

  return {
    ok: true,
    transport: opts.transport,
    server: server.version,
    task_id: taskID,
    stages: stages.length,
    inbox_polls: polls,
    conversation: conv.messages.length,
    answer: opts.answer,
    resources_updated_task: counts.updatedTask,
    resources_updated: counts.updated,
    list_changed: counts.listChanged,
    logging: counts.logging,
    progress: counts.progress,
    strict_tools_list_error: counts.strictToolsList || undefined,
  };
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const started = Date.now();
  const deadline = started + opts.timeout * 1000;
  // A hang anywhere (a request never answered, a transport stuck) fails
  // instead of blocking; unref so it never keeps a finished run alive.
  setTimeout(() => {
    process.stderr.write(`operator.mjs: FAIL: ${opts.transport}: no result within ${opts.timeout}s (hung)\n`);
    process.exit(1);
  }, opts.timeout * 1000 + 5000).unref();

  const counts = { strictToolsList: "", taskURI: "", updatedTask: 0, updated: 0, listChanged: 0, logging: 0, progress: 0 };
  const client = new Client({ name: "mas-mcp-interop-operator", version: "1.0.0" }, { capabilities: {} });
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
    if (n.params.uri === counts.taskURI) counts.updatedTask++;
    else counts.updated++;
  });
  client.setNotificationHandler(ResourceListChangedNotificationSchema, () => counts.listChanged++);
  client.setNotificationHandler(LoggingMessageNotificationSchema, () => counts.logging++);
  client.onerror = (err) => process.stderr.write(`operator.mjs: transport error: ${err?.message ?? err}\n`);

  const transport = makeTransport(opts.transport, opts.target);
  let report;
  let failure;
  try {
    await client.connect(transport, { timeout: Math.max(1000, deadline - Date.now()) });
    report = await run(opts, deadline, client, counts);
    report.pid = opts.transport === "stdio" ? transport.pid : undefined;
    report.seconds = Math.round((Date.now() - started) / 100) / 10;
  } catch (err) {
    failure = err instanceof Failure ? err.message : err?.stack ?? String(err);
  }
  try {
    if (opts.transport === "http" && transport.sessionId) await transport.terminateSession();
  } catch (err) {
    failure ??= `terminating the session: ${err?.message ?? err}`;
  }
  await client.close().catch(() => {});

  // Exit once the output is flushed, whatever handles (sockets, an SSE
  // stream reconnecting) the transports may have left behind.
  if (failure) {
    process.stderr.write(`operator.mjs: FAIL: ${opts.transport}: ${failure}\n`, () => process.exit(1));
    return;
  }
  const line = JSON.stringify(report) + "\n";
  if (opts.report) {
    writeFileSync(opts.report, line);
    process.exit(0);
  }
  process.stdout.write(line, () => process.exit(0));
}

await main();
