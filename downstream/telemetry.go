package downstream

import (
	"context"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/telemetry"
)

// tracedCall is callTool inside an execute_tool span (and the tool-call
// metrics). The MCP request itself gets its own client span, and its
// params._meta the trace context, from telemetry.ClientMiddleware, which
// every connection installs.
// The output is scrubbed of the server's secrets before the span records
// it. ins is the step's instruction_content's copy (the operator's
// completed or corrected arguments change the call made, not the step).
func (e *Executor) tracedCall(ctx context.Context, in *engine.ExecInput, server string, ins *engine.ToolCall) *engine.Output {
	ctx, span := telemetry.StartTool(ctx, server, ins.ToolName, ins.Arguments)
	out := e.cfg.Pool.scrubber(server).output(e.callTool(ctx, in, server, ins, e.decide(in, "tool_result")))
	span.End(out.Result["mcp_server_result"], out.Err)
	return out
}
