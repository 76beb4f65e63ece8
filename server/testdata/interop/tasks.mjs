#!/usr/bin/env node
// tasks.mjs follows mas-mcp's tasks as MCP tasks (protocol 2025-11-25,
// SEP-1686) with the TypeScript SDK's experimental tasks client.
//
// Usage:
//   node tasks.mjs run URL      add_task task-augmented and stream it to its
//                               result; then add another and cancel it
//   node tasks.mjs get URL ID   tasks/get and tasks/result of a task
//   node tasks.mjs ask URL ANSWER
//                               add_task task-augmented and stream it: at
//                               input_required the SDK calls tasks/result,
//                               whose elicitation requests are answered
//                               with {reply: ANSWER}
//
// Prints one JSON line; exit status 1 with what failed on stderr.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema, ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [mode, url, id] = process.argv.slice(2);
const text = (r) => (r.content || []).map((c) => c.text || "").join("");
const task = { task_name: "report", task_intention: "Research a topic and write a report." };

const capabilities = { tasks: { list: {}, cancel: {} } };
if (mode === "ask") capabilities.elicitation = { form: {} };
const client = new Client({ name: "tasks-test", version: "1" }, { capabilities });
const asked = [];
if (mode === "ask") {
  client.setRequestHandler(ElicitRequestSchema, async (req) => {
    const related = req.params._meta && req.params._meta["io.modelcontextprotocol/related-task"];
    asked.push({ message: req.params.message, related: related && related.taskId });
    return { action: "accept", content: { reply: id } };
  });
}
try {
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const tasks = client.experimental.tasks;
  if (mode === "run") {
    const out = { statuses: [] };
    for await (const m of tasks.callToolStream({ name: "add_task", arguments: task }, CallToolResultSchema, { task: { ttl: 600000 } })) {
      if (m.type === "taskCreated") out.completed = m.task.taskId, out.statuses.push("created:" + m.task.status);
      else if (m.type === "taskStatus") out.statuses.push(m.task.status);
      else if (m.type === "result") out.result = text(m.result);
      else if (m.type === "error") throw m.error;
    }
    for await (const m of tasks.callToolStream({ name: "add_task", arguments: task }, CallToolResultSchema, { task: { ttl: 600000 } })) {
      if (m.type === "taskCreated") {
        out.cancelled = m.task.taskId;
        out.cancel_answer = (await tasks.cancelTask(m.task.taskId)).status;
      } else if (m.type === "error") out.cancel_error = m.error.message;
    }
    out.cancelled_status = (await tasks.getTask(out.cancelled)).status;
    out.listed = (await tasks.listTasks()).tasks.map((t) => `${t.taskId}:${t.status}`);
    process.stdout.write(JSON.stringify(out) + "\n");
  } else if (mode === "ask") {
    const out = { statuses: [] };
    for await (const m of tasks.callToolStream({ name: "add_task", arguments: task }, CallToolResultSchema, { task: { ttl: 600000 } })) {
      if (m.type === "taskCreated") out.task = m.task.taskId, out.statuses.push("created:" + m.task.status);
      else if (m.type === "taskStatus") out.statuses.push(m.task.status);
      else if (m.type === "result") out.result = text(m.result), out.is_error = !!m.result.isError;
      else if (m.type === "error") throw m.error;
    }
    out.asked = asked;
    process.stdout.write(JSON.stringify(out) + "\n");
  } else if (mode === "get") {
    const t = await tasks.getTask(id);
    const r = await tasks.getTaskResult(id, CallToolResultSchema);
    process.stdout.write(JSON.stringify({ status: t.status, result: text(r), related: r._meta && r._meta["io.modelcontextprotocol/related-task"] }) + "\n");
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
} catch (err) {
  process.stderr.write(`tasks.mjs: FAIL: ${err.stack || err}\n`);
  process.exitCode = 1;
} finally {
  await client.close().catch(() => {});
}
