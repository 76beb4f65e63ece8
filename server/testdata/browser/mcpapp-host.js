// mcpapp-host.js: a minimal MCP Apps host for the browser test (mcpapp.mjs),
// bundled by server/mcpapp/build.mjs --host. In the page it connects to
// mas-mcp with the TypeScript SDK's client (streamable HTTP, same origin),
// reads the UI resource a tool names in _meta.ui, renders it in a sandboxed
// iframe and relays between the view and the server with ext-apps'
// AppBridge, as Claude, ChatGPT or VS Code do. window.host is what the
// driver calls.

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { AppBridge, PostMessageTransport, getToolUiResourceUri } from "@modelcontextprotocol/ext-apps/app-bridge";

const HOST = { name: "mas-mcp-test-host", version: "1.0.0" };

window.host = {
  /** open connects, calls tool with args and renders the view the tool names; returns what it saw. */
  async open(tool, args) {
    const t0 = performance.now();
    const mark = (what) => console.log(`host: ${what} at ${Math.round(performance.now() - t0)} ms`);
    const client = new Client(HOST);
    await client.connect(new StreamableHTTPClientTransport(new URL("/mcp", location.origin)));
    mark("connected");
    const { tools } = await client.listTools();
    const def = tools.find((t) => t.name === tool);
    if (!def) throw new Error(`the server has no tool ${tool}`);
    const uri = getToolUiResourceUri(def);
    if (!uri) throw new Error(`tool ${tool} names no UI resource in _meta.ui.resourceUri`);
    const res = await client.readResource({ uri });
    const content = res.contents[0];
    if (!content || typeof content.text !== "string") throw new Error(`resource ${uri} has no text`);

    const iframe = document.createElement("iframe");
    iframe.id = "view";
    iframe.setAttribute("sandbox", "allow-scripts allow-forms");
    iframe.title = "MCP App";
    document.getElementById("frame").append(iframe);

    const bridge = new AppBridge(client, HOST, { serverTools: {}, openLinks: {}, logging: {} });
    const initialized = new Promise((resolve) => (bridge.oninitialized = resolve));
    bridge.onsizechange = ({ height }) => {
      if (height) iframe.style.height = `${Math.ceil(height) + 4}px`;
    };
    await bridge.connect(new PostMessageTransport(iframe.contentWindow, iframe.contentWindow));
    iframe.srcdoc = content.text;
    await initialized;
    mark("view initialized");

    const result = await client.callTool({ name: tool, arguments: args });
    if (result.isError) throw new Error(`${tool}: ${JSON.stringify(result.content)}`);
    mark(`${tool} returned`);
    await bridge.sendToolInput({ arguments: args });
    await bridge.sendToolResult(result);
    window.host.client = client;
    window.host.bridge = bridge;
    return { uri, mimeType: content.mimeType, meta: def._meta || null, result: result.structuredContent };
  },

  /** show calls show_task for a task and hands the view the result, as a host does when the model shows the task again. */
  async show(taskID) {
    const result = await window.host.client.callTool({ name: "show_task", arguments: { task_id: taskID } });
    if (result.isError) throw new Error(`show_task: ${JSON.stringify(result.content)}`);
    await window.host.bridge.sendToolResult(result);
  },
};
document.getElementById("ready").textContent = "host ready";
